"""Every data file inside ``ares_cli/`` (the toy world's models and splits, the rehearsal kit's stand-ins)
is named by a ``package-data`` glob of ``pyproject.toml``, so an installed package carries what its
manifests (``package:ares_cli/...``) and pipelines read."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ares_cli"


def shipped(globs: list[str]) -> set[Path]:
    """The files setuptools adds for ``globs`` (relative to the package, ``*`` within one directory)."""
    return {path for pattern in globs for path in PACKAGE.glob(pattern) if path.is_file()}


def data_files() -> set[Path]:
    """The package's files that are not Python source or bytecode."""
    return {
        path
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }


def test_every_data_file_of_the_package_ships():
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = setuptools["package-data"]["ares_cli"]
    missing = sorted(str(p.relative_to(PACKAGE)) for p in data_files() - shipped(globs))
    assert missing == [], "add a package-data glob to pyproject.toml"
    assert any(p.relative_to(PACKAGE).parts[:2] == ("rehearsal", "data") for p in shipped(globs))


def test_a_data_file_no_glob_names_is_found():
    globs = ["toy/base/*", "toy/data/*.jsonl"]
    missing = {p.relative_to(PACKAGE).parts[0] for p in data_files() - shipped(globs)}
    assert "rehearsal" in missing
