"""`make images`: build the training images of images/ with the Docker SDK.

    python tools/build_images.py [--base IMAGE] [--ca-file PEM] [--tag TAG] [NAME...]

Each ``images/<NAME>/Dockerfile`` is built with the build context it expects: the example
training scripts (``specs/*.py``) and, when a CA file is given or found, ``extra-ca.crt``,
which pip trusts during the build (a proxy that intercepts TLS; see the Dockerfiles). The CA
file is ``--ca-file``, else ``TFDECLARE_BUILD_CA``, else pip's own ``PIP_CERT``; none means
pip trusts what the base image trusts. ``--base`` is passed as the ``BASE`` build argument
(each Dockerfile names its default). The build uses host networking, so it reaches what this
machine reaches, and passes on ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY`` as the
engine's predefined build arguments. The engine's layer cache makes a repeated build quick.
The base is never pulled here: build or pull it first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TAGS = {"tf-cpu": "tfdeclare-examples:2.21.0-cpu", "tf-gpu": "tfdeclare-examples:2.21.0-gpu"}
PROXY_ARGS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def ca_file(given: str | None) -> Path | None:
    """The CA bundle pip is to trust in the build, or None."""
    for candidate in (given, os.environ.get("TFDECLARE_BUILD_CA"), os.environ.get("PIP_CERT")):
        if candidate:
            path = Path(candidate)
            if not path.is_file():
                raise SystemExit(f"build_images: no CA file {path}")
            return path
    return None


def build(client: Any, name: str, *, base: str | None, ca: Path | None, tag: str | None = None) -> str:
    """Build ``images/<name>``; returns its tag. Raises ``docker.errors.BuildError``."""
    dockerfile = ROOT / "images" / name / "Dockerfile"
    if not dockerfile.is_file():
        raise SystemExit(f"build_images: no {dockerfile.relative_to(ROOT)}")
    tag = tag or TAGS.get(name, f"tfdeclare-{name}:latest")
    buildargs = {key: value for key in PROXY_ARGS if (value := os.environ.get(key))}
    if base:
        buildargs["BASE"] = base
    with tempfile.TemporaryDirectory(prefix="tfdeclare-image-") as context:
        for script in sorted((ROOT / "specs").glob("*.py")):
            shutil.copy2(script, context)
        shutil.copy2(dockerfile, Path(context) / "Dockerfile")
        if ca is not None:
            shutil.copy2(ca, Path(context) / "extra-ca.crt")
        client.images.build(path=context, tag=tag, buildargs=buildargs, network_mode="host", rm=True)
    return tag


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tools/build_images.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"images to build (default: {' '.join(TAGS)})"
    )
    parser.add_argument("--base", help="the BASE build argument (default: each Dockerfile's own)")
    parser.add_argument(
        "--ca-file", help="a CA bundle for pip in the build (default: $TFDECLARE_BUILD_CA, $PIP_CERT)"
    )
    parser.add_argument("--tag", help="the tag (one image only)")
    args = parser.parse_args(argv)
    names = args.names or list(TAGS)
    if args.tag and len(names) != 1:
        parser.error("--tag names one image")
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=1800)
        client.ping()
    except docker.errors.DockerException as err:
        print(
            f"build_images: no Docker engine answers (DOCKER_HOST or the default socket): {err}",
            file=sys.stderr,
        )
        return 1
    ca = ca_file(args.ca_file)
    failed = 0
    for name in names:
        print(f"building images/{name} ...", flush=True)
        try:
            tag = build(client, name, base=args.base, ca=ca, tag=args.tag)
        except docker.errors.BuildError as err:
            tail = "".join(
                str(line.get("stream", line.get("error", ""))) for line in list(err.build_log)[-15:]
            )
            print(f"build_images: images/{name} failed: {err.msg}\n{tail}", file=sys.stderr)
            failed += 1
        except docker.errors.APIError as err:
            print(f"build_images: images/{name} failed: {err.explanation or err}", file=sys.stderr)
            failed += 1
        else:
            print(f"built {tag}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
