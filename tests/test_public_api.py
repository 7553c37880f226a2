"""Every public name listed in ``docs/api.md`` imports from its listed path, each listed module declares
exactly those names in ``__all__``, every public module is listed, and the compatibility paths of
``docs/architecture.md`` still work."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import import_graph as g
import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def documented() -> dict[str, list[str]]:
    """Module -> the names its ``Public:`` paragraph lists, in the order of the page."""
    out: dict[str, list[str]] = {}
    for section in re.split(r"^### ", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        module = re.match(r"`([\w.]+)`", section).group(1)
        public = re.search(r"^Public: (.+?)(?:\n\n|\Z)", section, flags=re.MULTILINE | re.DOTALL)
        out[module] = re.findall(r"`(\w+)`", public.group(1))
    return out


DOCUMENTED = documented()
PUBLIC_PACKAGES = ("ares_cli.algorithms", "ares_cli.scoring", "ares_cli.grading", "ares_cli.store")


def declares_all(path: Path) -> bool:
    """Whether a module's source assigns ``__all__`` at its top level (read with ``ast``, nothing imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
    targets += [n.target for n in tree.body if isinstance(n, ast.AnnAssign)]
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def public_modules(packages=PUBLIC_PACKAGES) -> set[str]:
    """The public packages and each of their modules that declares ``__all__``."""
    files = g.module_files()
    return set(packages) | {
        name for name, path in files.items() if name.rpartition(".")[0] in packages and declares_all(path)
    }


def test_every_public_module_is_listed():
    assert sorted(public_modules() - set(DOCUMENTED)) == [], (
        "a module with __all__ needs its docs/api.md section"
    )
    assert sorted(set(DOCUMENTED) - public_modules()) == [], "docs/api.md lists a module that is not public"


@pytest.mark.parametrize("package", ["ares_cli.algorithms", "ares_cli.scoring", "ares_cli.store"])
def test_a_package_lists_its_public_modules(package):
    modules = {name.rpartition(".")[2] for name in public_modules() if name.startswith(package + ".")}
    assert sorted(importlib.import_module(package).__all__) == sorted(modules)


def test_a_module_without_its_section_is_found(tmp_path):
    for name, text in {"__init__.py": "", "pkg/__init__.py": "__all__ = ['a']\n", "pkg/a.py": "__all__ = []\n",
                       "pkg/b.py": "x = 1\n", "pkg/c.py": "__all__: list[str] = ['y']\n"}.items():  # fmt: skip
        (tmp_path / "ares_cli" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ares_cli" / name).write_text(text)
    files = g.module_files(tmp_path / "ares_cli")
    found = {name for name, path in files.items() if name.startswith("ares_cli.pkg.") and declares_all(path)}
    assert found == {"ares_cli.pkg.a", "ares_cli.pkg.c"}


def test_the_page_lists_the_researchers_modules():
    assert {"ares_cli.algorithms", "ares_cli.scoring.metrics", "ares_cli.grading", "ares_cli.store"} <= set(
        DOCUMENTED
    )
    assert "difficulty_bucket" in DOCUMENTED["ares_cli.algorithms.buckets"]


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_names_import_from_their_documented_path(module):
    names = DOCUMENTED[module]
    assert names and len(names) == len(set(names)), f"{module}: empty or repeated names in docs/api.md"
    assert sorted(importlib.import_module(module).__all__) == sorted(names), (
        f"docs/api.md vs {module}.__all__"
    )
    for name in names:
        scope: dict[str, object] = {}
        exec(f"from {module} import {name}", scope)
        assert scope[name] is not None


def test_difficulty_bucket_still_imports_from_aepo():
    from ares_cli.algorithms.aepo import difficulty_bucket
    from ares_cli.algorithms.buckets import difficulty_bucket as home

    assert difficulty_bucket is home
    assert [difficulty_bucket(c, 8) for c in (0, 2, 3, 5, 6, 8)] == [
        "hard",
        "hard",
        "medium",
        "medium",
        "easy",
        "easy",
    ]


@pytest.mark.parametrize("old", sorted(g.COMPAT_NAMES))
def test_moved_names_are_the_same_objects_at_their_old_path(old):
    new, names = g.COMPAT_NAMES[old]
    for name in names:
        assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", sorted(g.COMPAT_MODULES))
def test_moved_modules_keep_their_public_names_at_their_old_path(old):
    module, new = importlib.import_module(old), importlib.import_module(g.COMPAT_MODULES[old])
    public = [
        n
        for n in vars(new)
        if not n.startswith("_") and getattr(getattr(new, n), "__module__", "") == new.__name__
    ]
    assert public, f"{new.__name__} defines nothing public"
    for name in public:
        assert getattr(module, name) is getattr(new, name), f"{old}.{name}"


def test_importing_the_public_packages_and_the_cli_stays_light():
    code = (
        "import sys, ares_cli.algorithms, ares_cli.scoring, ares_cli.store, ares_cli.main\n"
        "print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
