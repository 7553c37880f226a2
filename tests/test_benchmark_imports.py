"""Every project name a benchmark or study script imports exists where it imports it from.

The scripts under benchmarks/ and studies/ run outside `make test` (minutes each), and most import project
modules inside their functions, so a module that moves breaks them silently until the next run. This reads
each script's imports (at any depth) and resolves every ``ares_cli`` module and name they use.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("benchmarks/**/*.py"), *REPO.glob("studies/*.py")])


def project_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) for every ``ares_cli`` import of ``path``, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "ares_cli"
        ):
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "ares_cli"]
    return found


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent is a plain module, not a package
        return False


def unresolved(path: Path, root: Path = REPO) -> list[str]:
    """One line per import of ``path`` that names a missing project module or name (paths below ``root``)."""
    problems = []
    for line, module, name in project_imports(path):
        where = f"{path.relative_to(root)}:{line}"
        if not _exists(module):
            problems.append(f"{where}: no module {module}")
            continue
        if name is None or name == "*":
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:  # an optional extra the module needs (trl, vllm): not checked here
            if (err.name or "").split(".")[0] == "ares_cli":
                raise
            continue
        if not hasattr(mod, name) and not (hasattr(mod, "__path__") and _exists(f"{module}.{name}")):
            problems.append(f"{where}: {module} has no {name}")
    return problems


def test_the_scripts_are_found():
    names = {p.name for p in SCRIPTS}
    assert {"bench_zero3_load.py", "bench_sync_memory.py", "run_study.py", "summarize_recipes.py"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(REPO)) for p in SCRIPTS])
def test_every_project_import_resolves(path):
    assert unresolved(path) == []


def test_a_moved_module_and_a_missing_name_are_named(tmp_path):
    script = tmp_path / "benchmarks" / "bench_moved.py"
    script.parent.mkdir()
    script.write_text(
        "def main():\n    from ares_cli.toy.twins import build_twin\n"
        "    from ares_cli.rehearsal.twins import no_such_name, build_twin as b\n"
        "    import ares_cli.no_such_room\n",
        encoding="utf-8",
    )
    assert unresolved(script, tmp_path) == [
        "benchmarks/bench_moved.py:2: no module ares_cli.toy.twins",
        "benchmarks/bench_moved.py:3: ares_cli.rehearsal.twins has no no_such_name",
        "benchmarks/bench_moved.py:4: no module ares_cli.no_such_room",
    ]
