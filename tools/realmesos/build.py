"""Builds a runnable Apache Mesos 1.11.0 master and agent (``make real-mesos``).

What this module owns: fetching the ``mesos.scheduler`` 1.11.0 binary tarball from the
package registry pip is configured with (its simple index; the sha256 is pinned), and
compiling, next to the libmesos it holds, the small programs of this folder:

- ``realmesos-cluster`` (launcher.cpp): the master and N agents in one process;
- ``mesos-containerizer`` (containerizer.cpp): the ``launch`` subcommand the agent runs;
- ``executor.py``: the command executor (standard library only). The build names no
  interpreter: each cluster gets a launcher folder of its own (``launcher_dir``) whose
  ``mesos-executor`` wrapper runs the Python of the checkout that started it, since the cache
  is shared by every checkout on the machine;
- ``docker_executor.py``: the Docker containerizer's executor (``mesos-docker-executor``, the
  same way), over the command executor's connection handling;
- ``libssl.so.1.0.0`` / ``libcrypto.so.1.0.0``: stubs with OpenSSL 1.0's symbol versions
  (libmesos links them; with SSL off nothing calls them), from openssl-symbols.txt;
- ``libcurl.so.4``: libcurl's seven calls under their old version tag, forwarded to the
  system's libcurl (curl_forward.c);
- ``libpystub.so``: the Python 2.7 symbols the bindings in the same object refer to.

Each build goes into ``<cache>/realmesos/1.11.0-builds/<digest>`` (``TFDECLARE_TEST_CACHE`` or
``~/.cache/tfdeclare-tests``, as the tests' other components), ``<digest>`` that of the sources
of this folder: a changed source builds a new folder, made aside and renamed into place whole,
so a rebuild never replaces a file under a running cluster (older builds are left as they are;
remove them by hand). Nothing it makes is committed. It needs a C++ compiler and, from
Debian, libsvn1, libapr1, libsasl2-2, libcurl4 and zlib (``.ci/run`` installs them as root);
it says which are missing.

``python tools/realmesos/build.py`` builds (or finds the build current) and prints the folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

VERSION = "1.11.0"
PROJECT = "mesos-scheduler"  # the registry's normalised name of mesos.scheduler
FILENAME = f"mesos.scheduler-{VERSION}.linux-x86_64.tar.gz"
SHA256 = "1d376f20bca6d05ee8b90c1c123a452b28753497ccc2f1c80ea3ac94c12e8f6e"
MEMBER = "./usr/local/lib/python2.7/dist-packages/mesos/scheduler/_scheduler.so"
HERE = Path(__file__).resolve().parent
PROGRAM_SOURCES = (
    *("abi.hpp", "launcher.cpp", "zookeeper.cpp", "containerizer.cpp"),
    *("pystub.c", "curl_forward.c", "curl.map"),
)
EXECUTORS = {"mesos-executor": "executor.py", "mesos-docker-executor": "docker_executor.py"}
SOURCES = (*PROGRAM_SOURCES, "openssl-symbols.txt", *EXECUTORS.values(), "build.py")
DEBIAN = {  # library file -> Debian package
    "libsvn_delta-1.so.1": "libsvn1",
    "libsvn_subr-1.so.1": "libsvn1",
    "libapr-1.so.0": "libapr1",
    "libsasl2.so.2": "libsasl2-2",
    "libcurl.so.4": "libcurl4",
    "libz.so.1": "zlib1g",
}


class BuildError(Exception):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("TFDECLARE_TEST_CACHE", Path.home() / ".cache" / "tfdeclare-tests"))


def builds_root() -> Path:
    return cache_root() / "realmesos" / f"{VERSION}-builds"


def build_dir() -> Path:
    """Where the build of these sources lives (never changed once made)."""
    return builds_root() / sources_digest()[:16]


def sources_digest() -> str:
    digest = hashlib.sha256(SHA256.encode())
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return digest.hexdigest()


def is_current(folder: Path | None = None) -> bool:
    folder = folder or build_dir()
    stamp = folder / "stamp"
    return stamp.exists() and stamp.read_text().strip() == sources_digest()


# ---- the tarball -------------------------------------------------------------------------


def index_urls() -> list[str]:
    """The simple indexes pip is configured with, in pip's order: its index (PIP_INDEX_URL,
    ``pip config``, else pip's own default), then the extra ones."""

    def configured(key: str) -> list[str]:
        env = os.environ.get(f"PIP_{key.upper().replace('-', '_')}")
        if env:
            return env.split()
        answer = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", f"global.{key}"],
            capture_output=True,
            text=True,
            check=False,
        )
        return answer.stdout.split() if answer.returncode == 0 else []

    index = configured("index-url")
    if not index:
        from pip._internal.models.index import PyPI  # pip's default index, as pip itself uses

        index = [PyPI.simple_url]
    return index + configured("extra-index-url")


def find_file(index: str) -> str | None:
    """The download URL of FILENAME on one simple index (PEP 691 JSON or PEP 503 HTML)."""
    page = index.rstrip("/") + f"/{PROJECT}/"
    request = urllib.request.Request(  # noqa: S310 (pip's own index)
        page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (pip's own index)
            body = response.read()
            kind = response.headers.get("Content-Type", "")
            base = response.geturl()
    except OSError:
        return None
    if "json" in kind:
        for entry in json.loads(body)["files"]:
            if entry["filename"] == FILENAME:
                return urllib.parse.urljoin(base, str(entry["url"]))
        return None
    from html.parser import HTMLParser

    found: list[str] = []

    class Links(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            href = dict(attrs).get("href")
            if tag == "a" and href and href.split("#")[0].endswith("/" + FILENAME):
                found.append(urllib.parse.urljoin(base, href))

    Links().feed(body.decode("utf-8", "replace"))
    return found[0] if found else None


def fetch_tarball(folder: Path) -> Path:
    target = folder / FILENAME
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == SHA256:
        return target
    tried = []
    for index in index_urls():
        url = find_file(index)
        tried.append(index)
        if url is None:
            continue
        with urllib.request.urlopen(url, timeout=600) as response:  # noqa: S310
            data = response.read()
        got = hashlib.sha256(data).hexdigest()
        if got != SHA256:
            raise BuildError(f"{FILENAME} from {index}: sha256 {got}, expected {SHA256}")
        partial = target.with_name(f".{FILENAME}.{os.getpid()}.part")  # builds at once never share it
        partial.write_bytes(data)
        partial.replace(target)
        return target
    raise BuildError(f"{FILENAME} is on none of pip's indexes ({', '.join(tried)})")


def extract_libmesos(tarball: Path, folder: Path) -> None:
    with tarfile.open(tarball) as archive:
        member = archive.extractfile(MEMBER)
        if member is None:
            raise BuildError(f"{FILENAME} has no {MEMBER}")
        data = member.read()
    (folder / "libmesos-1.11.0.so").write_bytes(data)


# ---- the programs ------------------------------------------------------------------------


def run(argv: list[str], folder: Path) -> None:
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")


def openssl_stubs(folder: Path, cc: str) -> None:
    """libssl.so.1.0.0 and libcrypto.so.1.0.0: every symbol libmesos needs, under its version
    node, each one aborting if ever called (only SSL-enabled builds call them)."""
    by_lib: dict[str, dict[str, list[str]]] = {}
    for line in (HERE / "openssl-symbols.txt").read_text().splitlines():
        if line.strip():
            lib, version, name = line.split()
            by_lib.setdefault(lib, {}).setdefault(version, []).append(name)
    for lib, versions in by_lib.items():
        code = io.StringIO()
        code.write("#include <stdio.h>\n#include <stdlib.h>\n")
        code.write("static void never(const char *n) { fprintf(stderr, \"realmesos: OpenSSL's %s was called"
                   " (SSL is off)\\n\", n); abort(); }\n")  # fmt: skip
        script = io.StringIO()
        previous = ""
        for version in sorted(versions):
            names = sorted(versions[version])
            for name in names:
                code.write(f'void {name}(void) {{ never("{name}"); }}\n')
            script.write(f"{version} {{\n  global:\n")
            script.write("".join(f"    {name};\n" for name in names))
            if not previous:
                script.write("  local: *;\n")
            script.write(f"}}{' ' + previous if previous else ''};\n")
            previous = version
        soname = f"lib{lib}.so.1.0.0"
        (folder / f"{lib}_stub.c").write_text(code.getvalue())
        (folder / f"{lib}.map").write_text(script.getvalue())
        run([cc, "-shared", "-fPIC", "-O1", "-o", soname, f"-Wl,-soname,{soname}",
             f"-Wl,--version-script,{lib}.map", f"{lib}_stub.c"], folder)  # fmt: skip


def system_libcurl() -> str:
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.startswith("libcurl.so.4 ") and "x86-64" in name:
            return path.strip()
    raise BuildError("no libcurl.so.4 on this machine (Debian: apt-get install libcurl4)")


def missing_libraries() -> list[str]:
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    present = {line.strip().split(" ")[0] for line in listing.splitlines()}
    return sorted({package for lib, package in DEBIAN.items() if lib not in present})


def compile_programs(folder: Path) -> None:
    cc = os.environ.get("CC", "gcc")
    cxx = os.environ.get("CXX", "g++")
    for tool in (cc, cxx):
        if shutil.which(tool) is None:
            raise BuildError(f"no {tool} (Debian: apt-get install g++)")
    for name in PROGRAM_SOURCES:
        shutil.copy(HERE / name, folder / name)
    openssl_stubs(folder, cc)
    real_curl = system_libcurl()
    run([cc, "-shared", "-fPIC", "-O1", "-o", "libcurl.so.4", "-Wl,-soname,libcurl.so.4",
         "-Wl,--version-script,curl.map", f'-DREAL_CURL="{real_curl}"', "curl_forward.c", "-ldl"],
        folder)  # fmt: skip
    run([cc, "-shared", "-fPIC", "-O1", "-o", "libpystub.so", "pystub.c"], folder)
    # DT_RPATH (not RUNPATH): it also finds the stubs libmesos itself needs.
    link = ["-L.", "-l:libmesos-1.11.0.so", "-l:libpystub.so", "-Wl,-rpath,$ORIGIN",
            "-Wl,--disable-new-dtags", "-Wl,--allow-shlib-undefined", "-Wl,--no-as-needed",
            "-lpthread"]  # fmt: skip
    # -rdynamic: zookeeper.cpp's vtables must be what libmesos binds to (see there)
    run([cxx, "-std=c++17", "-O1", "-rdynamic", "-o", "realmesos-cluster", "launcher.cpp", "zookeeper.cpp",
         *link, "-ldl"], folder)  # fmt: skip
    run([cxx, "-std=c++17", "-O1", "-o", "mesos-containerizer", "containerizer.cpp", *link], folder)


def launcher_dir(build: Path, folder: Path, python: str | None = None) -> Path:
    """A cluster's own ``MESOS_LAUNCHER_DIR``, made in ``folder``: the build's
    ``mesos-containerizer`` (a link: it finds libmesos beside its target) and the
    ``mesos-executor`` and ``mesos-docker-executor`` wrappers that run the build's executors
    with ``python`` (default: this interpreter, the one of the checkout whose tests start the
    cluster)."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "mesos-containerizer"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(build / "mesos-containerizer")
    program = shlex.quote(python or sys.executable)
    for name, source in EXECUTORS.items():
        wrapper = f'#!/bin/sh\nexec {program} {shlex.quote(str(build / source))} "$@"\n'
        scratch = folder / f".{name}.tmp"
        scratch.write_text(wrapper)
        scratch.chmod(0o755)
        scratch.replace(folder / name)
    return folder


def check_runs(folder: Path) -> None:
    done = subprocess.run(
        [str(folder / "mesos-containerizer")], capture_output=True, text=True, check=False, timeout=60
    )
    if "launch" not in done.stderr:
        raise BuildError(f"mesos-containerizer does not start:\n{done.stdout}{done.stderr}")


def build(folder: Path | None = None) -> Path:
    """The build of these sources in ``folder`` (default ``build_dir()``), made if missing.
    A folder that holds another build is moved aside, never changed: a cluster may run it."""
    folder = folder or build_dir()
    if is_current(folder):
        return folder
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise BuildError(f"the mesos.scheduler {VERSION} tarball is for Linux x86_64 only")
    missing = missing_libraries()
    if missing:
        raise BuildError(f"missing Debian packages: apt-get install {' '.join(missing)}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    downloads = cache_root() / "realmesos"
    downloads.mkdir(parents=True, exist_ok=True)
    tarball = fetch_tarball(downloads)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as scratch:
        work = Path(scratch) / "build"
        work.mkdir()
        extract_libmesos(tarball, work)
        compile_programs(work)
        for source in EXECUTORS.values():
            shutil.copy(HERE / source, work / source)
        check_runs(work)
        (work / "stamp").write_text(sources_digest() + "\n")
        if folder.exists() and not is_current(folder):  # another build (an explicit folder)
            folder.rename(folder.with_name(f"{folder.name}.replaced-{os.getpid()}-{time.time_ns()}"))
        try:
            work.rename(folder)  # whole, in one step; never over an existing folder
        except OSError:
            if not is_current(folder):  # not a build made meanwhile by another checkout
                raise
    return folder


def main() -> int:
    try:
        folder = build()
    except BuildError as error:
        print(f"make real-mesos: {error}", file=sys.stderr)
        return 1
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
