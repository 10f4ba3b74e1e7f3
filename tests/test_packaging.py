"""``pip install .`` is the CLI with what it needs at run time: every library the package
imports is a runtime dependency (or, imported lazily, one of an extra's); TensorFlow and the
test tools are not; the ``tensorflow`` extra accepts the versions requirements/ pins. And,
for real, a fresh virtual environment gets a working CLI, without TensorFlow, within the
issue 22 budget (200 MB)."""

from __future__ import annotations

import ast
import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
RUNTIME = {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]}
EXTRAS = {
    extra: {canonicalize_name(Requirement(r).name): Requirement(r) for r in requirements}
    for extra, requirements in PROJECT["optional-dependencies"].items()
}
INSTALL_BUDGET_MB = 200


def _pins(name: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file."""
    pins = {}
    for line in (REPO / "requirements" / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def _imports() -> dict[str, list[tuple[str, bool]]]:
    """Each outside top-level module the package imports -> (file, at module level?) per import."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted((REPO / "tfdeclare").rglob("*.py")):
        tree = ast.parse(path.read_text())
        in_function = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "tfdeclare" and top not in sys.stdlib_module_names:
                    where = str(path.relative_to(REPO))
                    found.setdefault(top, []).append((where, id(node) not in in_function))
    return found


def test_every_library_the_package_imports_is_installed_with_it() -> None:
    distributions = importlib.metadata.packages_distributions()
    imports = _imports()
    assert {"yaml", "jsonschema_rs", "httpx", "docker", "kazoo"} <= set(imports)  # the scan sees them
    for module, sites in imports.items():
        names = {canonicalize_name(d) for d in distributions.get(module, [module])}
        if names & RUNTIME:
            continue
        extras = [extra for extra, requirements in EXTRAS.items() if names & set(requirements)]
        assert extras, f"{module} (imported by {sites[0][0]}) is neither a dependency nor an extra's"
        eager = [where for where, module_level in sites if module_level]
        assert not eager, f"{module} is only in the {extras} extra, but imported at module level by {eager}"


def test_tensorflow_and_the_test_tools_are_no_runtime_dependency() -> None:
    heavy = {"tensorflow", "tensorflow-cpu", "tensorboard", *_pins("dev.txt"), *_pins("tensorflow.txt")}
    assert RUNTIME & {canonicalize_name(n) for n in heavy} == set()
    assert set(EXTRAS["tensorflow"]) == {"tensorflow-cpu", "tensorboard"}
    for name, version in _pins("tensorflow.txt").items():  # what make venv installs fits the extra
        assert EXTRAS["tensorflow"][name].specifier.contains(version), (name, version)


@pytest.mark.slow
@pytest.mark.e2e
def test_pip_install_gives_a_working_cli_without_tensorflow_within_budget(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    empty = _megabytes(venv)
    installed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", str(REPO)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    size = _megabytes(venv)
    assert size <= INSTALL_BUDGET_MB, f"{size} MB installed ({size - empty} MB beyond an empty venv)"
    tfd = venv / "bin" / "tfdeclare"
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    shown = {}
    for args in (["validate", "specs"], ["plan", "specs"], ["schema", "status"], ["completion", "bash"]):
        done = subprocess.run(
            [tfd, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (args, done.stderr)
        shown[args[0]] = done.stdout
    assert "Plan: 4 to create" in shown["plan"] and '"TFJobStatus"' in shown["schema"]
    no_tf = subprocess.run(
        [venv / "bin" / "python", "-c", "import tensorflow"], capture_output=True, check=False
    )
    assert no_tf.returncode == 1


def _megabytes(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*")) // 2**20


def test_the_license_and_the_metadata_agree() -> None:
    """A LICENSE file whose text is the licence the metadata names (PEP 639), and the fields
    an index page shows."""
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert {"Homepage", "Repository", "Issues", "Changelog"} <= set(PROJECT["urls"])
    assert PROJECT["authors"] and PROJECT["keywords"] and PROJECT["classifiers"]
    assert (REPO / "tfdeclare" / "py.typed").is_file()  # the "Typing :: Typed" classifier's promise


def test_the_version_has_one_source_and_a_changelog_entry() -> None:
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["hatch"]["version"]["path"] == "tfdeclare/__init__.py"
    from tfdeclare import __version__

    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog


@pytest.mark.slow
@pytest.mark.e2e
def test_the_sdist_and_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    """What a release publishes: ``python -m build`` (in its own isolated environment, as a
    release job runs it) and ``twine check --strict`` on both files."""
    from tfdeclare import __version__

    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"tfdeclare-{__version__}-py3-none-any.whl", f"tfdeclare-{__version__}.tar.gz"]
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, tmp_path.iterdir())],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with zipfile.ZipFile(tmp_path / files[0]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"tfdeclare-{__version__}.dist-info/METADATA").decode()
    assert f"tfdeclare-{__version__}.dist-info/licenses/LICENSE" in names
    assert "tfdeclare/_schemas/job.schema.json" in names and "tfdeclare/py.typed" in names
    assert "License-Expression: Apache-2.0" in metadata and f"Version: {__version__}" in metadata
