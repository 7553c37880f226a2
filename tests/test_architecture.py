"""The house plan holds: no import circle, every arrow points down a floor, no project code imports through
a compatibility path, and ``docs/architecture.md`` shows the floors the test enforces."""

from __future__ import annotations

import re
from pathlib import Path

import import_graph as g

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"


def _write_package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return g.module_files(root / g.PACKAGE)


def test_no_module_imports_itself_round_a_circle():
    assert g.cycles(g.module_graph()) == []


def test_every_room_is_on_exactly_one_floor():
    rooms = {g.short_name(r) for r in g.room_graph(skip=set(g.COMPAT_MODULES))}
    placed = [room for floor in g.FLOORS for room in floor]
    assert len(placed) == len(set(placed)), "a room is on two floors"
    assert rooms - set(placed) == set(), "a new room needs its floor in FLOORS and docs/architecture.md"
    assert set(placed) - rooms == set(), "FLOORS names a room that no longer exists"


def test_every_arrow_points_down_a_floor():
    assert g.upward_arrows() == []
    assert g.upward_arrows(skip=()) == [], "a compatibility path imports upward"


def test_no_top_level_folder_imports_another_round_a_circle():
    folders = g.folder_graph()
    assert g.cycles(folders) == [] and g.backward_arrows(folders) == []


def _scripts() -> dict[str, Path]:
    files = {}
    for folder in ("tests", "benchmarks", "studies"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name != "test_public_api.py":  # the one place that imports the old paths on purpose
                files[".".join(path.relative_to(REPO).with_suffix("").parts)] = path
    return files


def test_project_code_does_not_import_through_compatibility_paths():
    assert g.compat_imports(g.module_files() | _scripts()) == []


def test_the_measured_floors_are_the_plan():
    floor_of = g.measure()["floor_of"]
    assert floor_of == {room: level for level, rooms in enumerate(g.FLOORS) for room in rooms}


def doc_block(text: str) -> str:
    """The generated block of ``docs/architecture.md``, markers included."""
    assert text.count(g.BEGIN) == 1 and text.count(g.END) == 1, "docs/architecture.md: one import-graph block"
    return text[text.index(g.BEGIN) : text.index(g.END) + len(g.END)]


def test_the_docs_generated_block_is_what_the_tool_prints():
    block = doc_block(DOC.read_text(encoding="utf-8"))
    assert block == g.markdown(), "run `python tests/import_graph.py --write`"


def test_the_doc_shows_the_floors_the_test_enforces():
    rows = re.findall(
        r"^\| (\d+) \| `([\w.]+)` \|", doc_block(DOC.read_text(encoding="utf-8")), flags=re.MULTILINE
    )
    doc: dict[int, set[str]] = {}
    for level, room in rows:
        doc.setdefault(int(level), set()).add(room)
    assert doc == {level: set(rooms) for level, rooms in enumerate(g.FLOORS)}


def test_the_doc_says_what_each_room_holds():
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| room | what it holds |") :].split("\n\n")[0]
    named = [
        room for row in table.splitlines()[2:] for room in re.findall(r"`([\w.]+)`", row.split(" | ")[0])
    ]
    assert sorted(named) == sorted(room for rooms in g.FLOORS for room in rooms)


def test_the_doc_lists_the_compatibility_paths():
    text = DOC.read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(ares_cli[\w.]+)` \| `(ares_cli[\w.]+)` \|", text, flags=re.MULTILINE))
    expected = set(g.COMPAT_MODULES.items())
    expected |= {
        (f"{old}.{name}", f"{new}.{name}") for old, (new, names) in g.COMPAT_NAMES.items() for name in names
    }
    assert rows == expected


# The checks themselves catch what they are for, on small packages written here.


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "ares_cli/__init__.py": "",
            "ares_cli/low.py": "def f():\n    from ares_cli.high import g\n",
            "ares_cli/high.py": "from ares_cli.low import f\n",
            "ares_cli/pkg/__init__.py": "",
            "ares_cli/pkg/a.py": "from ares_cli.pkg import b\n",
            "ares_cli/pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
        },
    )
    assert g.cycles(g.module_graph(modules)) == [
        ["ares_cli.high", "ares_cli.low"],
        ["ares_cli.pkg.a", "ares_cli.pkg.b"],
    ]
    assert g.cycles(g.room_graph(modules)) == [["ares_cli.high", "ares_cli.low"]]
    plan = (("__init__",), ("low",), ("high",), ("pkg",))
    assert g.upward_arrows(modules, plan) == ["ares_cli.low:2 imports ares_cli.high (low -> high)"]


def test_a_folder_whose_rooms_sit_on_both_sides_of_another_is_a_circle(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "ares_cli/__init__.py": "",
            "ares_cli/stages/__init__.py": "",
            "ares_cli/stages/prep.py": "def f():\n    from ares_cli.training.sft import g\n",
            "ares_cli/training/__init__.py": "",
            "ares_cli/training/sft.py": "",
            "ares_cli/training/rl/__init__.py": "",
            "ares_cli/training/rl/loop.py": "from ares_cli.stages import prep\n",
        },
    )
    assert g.cycles(g.room_graph(modules)) == []  # room by room, the arrows point down
    folders = g.folder_graph(modules)
    assert g.cycles(folders) == [["ares_cli.stages", "ares_cli.training"]]
    assert g.backward_arrows(folders) == ["stages -> training", "training -> stages"]


def test_compatibility_imports_are_reported(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "ares_cli/__init__.py": "",
            "ares_cli/new.py": "def moved(): ...\ndef kept(): ...\n",
            "ares_cli/old.py": "from ares_cli.new import moved\n",
            "ares_cli/shim.py": "from ares_cli.new import *\n",
            "ares_cli/user.py": "from ares_cli.old import moved\ndef f():\n    import ares_cli.shim\n",
            "ares_cli/fine.py": "from ares_cli.new import moved\nfrom ares_cli.old import kept\n",
        },
    )
    found = g.compat_imports(
        modules, modules, {"ares_cli.shim": "ares_cli.new"}, {"ares_cli.old": ("ares_cli.new", ("moved",))}
    )
    assert found == [
        "ares_cli.user:1 imports ['moved'] from ares_cli.old; use ares_cli.new",
        "ares_cli.user:3 imports ares_cli.shim; use ares_cli.new",
    ]


def test_rooms_arrows_and_floors_of_a_small_package(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "ares_cli/__init__.py": "",
            "ares_cli/errors.py": "",
            "ares_cli/store/__init__.py": "",
            "ares_cli/store/files.py": "from ares_cli.errors import E\n",
            "ares_cli/training/__init__.py": "",
            "ares_cli/training/rl/__init__.py": "",
            "ares_cli/training/rl/loop.py": "import ares_cli.store.files\nfrom ares_cli.training import sft\n",
            "ares_cli/training/sft.py": "def f():\n    from ares_cli import errors\n",
        },
    )
    rooms = g.room_graph(modules)
    assert rooms == {
        "ares_cli": set(),
        "ares_cli.errors": set(),
        "ares_cli.store": {"ares_cli.errors"},
        "ares_cli.training": {"ares_cli.errors"},
        "ares_cli.training.rl": {"ares_cli.store", "ares_cli.training"},
    }
    assert g.floors(rooms) == {
        "ares_cli": 0,
        "ares_cli.errors": 0,
        "ares_cli.store": 1,
        "ares_cli.training": 1,
        "ares_cli.training.rl": 2,
    }
