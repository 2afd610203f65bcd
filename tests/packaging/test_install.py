"""minibroker as a user installs it: the built wheel claims one top-level name, `minibroker`, so a
user's project may have packages of any name, and its pytest plugin works there.

The wheel is built from a copy of the source (setuptools writes build/ and *.egg-info beside the
source) with pip, as `pip install /path/to/minibroker` builds it, and installed with pip, without its
dependencies, into a fresh virtual environment. That environment sees, besides the wheel, exactly the
distributions the wheel declares (Requires-Dist, followed transitively) and pytest's, taken from the
test environment through a directory of links: nothing of the repository, and no dependency the
wheel forgot to declare. A small project beside it has its own `storage`, `protocol` and `pipeline`
packages and runs a test with the `minibroker` fixture that imports its own `storage`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _folders_with_modules(folder: Path) -> list[Path]:
    """`folder` and every folder under it that holds .py files (the packages a build must list)."""
    return sorted({path.parent for path in folder.rglob("*.py") if "__pycache__" not in path.parts})


def test_the_packages_list_matches_the_folders():
    """pyproject's explicit `packages` names every folder with Python files under the mapped roots,
    and nothing else: a new subpackage left out would be missing from the wheel while every test in
    the repository still passed."""
    mapping: dict[str, str] = SETUPTOOLS["package-dir"]
    expected = set()
    for package, folder in mapping.items():
        for found in _folders_with_modules(ROOT / folder):
            relative = found.relative_to(ROOT / folder)
            expected.add(".".join([package, *relative.parts]))
    assert set(SETUPTOOLS["packages"]) == expected
    assert {name.split(".")[0] for name in expected} == {"minibroker"}
    assert len(SETUPTOOLS["packages"]) == len(set(SETUPTOOLS["packages"])), "a package listed twice"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from the source (build isolation: setuptools as pyproject's build-system
    asks, from pip's cache or PyPI)."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    for folder in set(SETUPTOOLS["package-dir"].values()):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                             "--quiet", "--wheel-dir", str(out), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("minibroker-*.whl")
    return built


def test_the_wheel_installs_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"minibroker"}
    assert top_level.split() == ["minibroker"]
    for layer in ("protocol", "storage", "quotas", "pipeline", "producer"):
        assert f"minibroker/{layer}/__init__.py" in names
    assert "minibroker/storage/producer_state/__init__.py" in names  # a subpackage of a mapped layer


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions these requirements need, transitively (extras left out)."""
    seen: dict[str, metadata.Distribution] = {}
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = requirement.name.lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = distribution = metadata.distribution(requirement.name)
        pending += [Requirement(r) for r in distribution.requires or ()]
    return list(seen.values())


def _link_distributions(distributions: list[metadata.Distribution], into: Path) -> None:
    """Link the top-level files and folders of each distribution (packages, modules, dist-info) into
    `into`; scripts installed outside site-packages are left out."""
    into.mkdir()
    for distribution in distributions:
        for file in distribution.files or ():
            if file.parts[0] in ("..", "__pycache__") or len(file.parts) == 0:
                continue
            top = Path(str(distribution.locate_file(file.parts[0])))
            target = into / file.parts[0]
            if top.exists() and not target.exists():
                target.symlink_to(top)


@pytest.fixture(scope="module")
def user_venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed (pip, --no-deps) and its declared
    dependencies and pytest visible through a .pth file."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    # The repository kept off every path, as for the user's commands below: a PYTHONPATH naming it (the
    # `spark` fixture sets one for Spark's workers, for the rest of a run) makes pip find minibroker
    # already there and install nothing.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=_clean_env(), timeout=120)
    python = venv / "bin" / "python"
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                             "--disable-pip-version-check", "--quiet", str(wheel)],
                            capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    declared = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    links = venv.parent / "dependencies"
    _link_distributions(_closure([*declared, "pytest"]), links)
    site_packages = next((venv / "lib").glob("python3.*/site-packages"))
    (site_packages / "minibroker-test-dependencies.pth").write_text(f"{links}\n")
    return venv


USER_PROJECT = {
    "storage/__init__.py": '"""The user\'s own storage package."""\n',
    "storage/errors.py": 'def storage_error_message(code):\n    return f"storage error {code}"\n',
    "protocol/__init__.py": "NAME = 'the user\\'s protocol'\n",
    "pipeline/__init__.py": "STAGES = ('extract', 'load')\n",
    "tests/test_with_minibroker.py": '''
import socket

import pytest

import pipeline
import protocol
from minibroker.admin_client import AdminClient
from minibroker.faults import FaultRule
from storage.errors import storage_error_message


def test_the_projects_own_packages_are_its_own():
    assert storage_error_message(3) == "storage error 3"
    assert protocol.NAME == "the user's protocol" and pipeline.STAGES == ("extract", "load")


@pytest.mark.minibroker(num_partitions=3, sasl_users={"alice": "alice-secret"})
def test_the_fixture(minibroker):
    with AdminClient(minibroker.bootstrap) as client:
        response = client.call(3, {"topics": [{"name": "orders", "topic_id": None}], "allow_auto_topic_creation": True,
                                   "include_topic_authorized_operations": False,
                                   "include_cluster_authorized_operations": False})
    assert len(response.topics[0].partitions) == 3
    with AdminClient(minibroker.sasl_bootstrap, sasl_mechanism="PLAIN", sasl_username="alice",
                     sasl_password="alice-secret"):
        pass
    minibroker.broker.faults.add(FaultRule("Metadata", "close"))
    with pytest.raises(Exception):
        with AdminClient(minibroker.bootstrap) as client:
            client.call(3, {"topics": None, "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False,
                            "include_cluster_authorized_operations": False})
    assert storage_error_message(1) == "storage error 1"


def test_two_brokers(minibroker_factory):
    first, second = minibroker_factory(), minibroker_factory()
    for running in (first, second):
        socket.create_connection((running.host, running.port), timeout=10).close()
''',
}


@pytest.fixture
def user_project(tmp_path) -> Path:
    project = tmp_path / "project"
    for name, text in USER_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    return project


def _clean_env() -> dict[str, str]:
    """The environment without anything that would point Python at the repository."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def test_a_project_with_its_own_storage_package_runs_the_fixture(user_venv, user_project):
    python = user_venv / "bin" / "python"
    where = subprocess.run([python, "-c", "import minibroker, minibroker.storage.log as log, storage; "
                            "print(minibroker.__file__); print(log.__file__); print(storage.__file__)"],
                           cwd=user_project, capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert where.returncode == 0, where.stderr
    installed, layer, users = where.stdout.split()
    assert Path(installed).is_relative_to(user_venv) and Path(layer).is_relative_to(user_venv)
    assert Path(users).is_relative_to(user_project)

    result = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests"], cwd=user_project,
                            capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_the_installed_command(user_venv, tmp_path):
    result = subprocess.run([user_venv / "bin" / "minibroker", "--help"], cwd=tmp_path, capture_output=True,
                            text=True, env=_clean_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "serve" in result.stdout and "topics" in result.stdout
