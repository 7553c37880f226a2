"""The import graph of ``ares_cli``, read from the source with ``ast`` (nothing is imported).

A *room* is a package (``ares_cli/store/``, ``ares_cli/training/rl/``: its own modules, not its
subpackages) or a module at the top of ``ares_cli`` (``config.py``); the root ``ares_cli/__init__.py`` is
the room ``ares_cli``. An *arrow* is one room importing another, counted once per pair. Every import is
read: at module level, inside functions, and under ``if TYPE_CHECKING:``. Floors are the longest-path
layering of the room graph (floor 0 imports nothing of the project).

The house plan the graph is checked against (``tests/test_architecture.py``) is here too: ``FLOORS``, the
rooms from the bottom up (``docs/architecture.md`` shows the same table; a test keeps them equal), and
``COMPAT_MODULES`` / ``COMPAT_NAMES``, the old import paths kept for code outside the project.

A *folder* is a top-level package with all its subpackages (``training/`` with ``training/rl/``), or a
module at the top; the folder graph is read with every module counted, the compatibility paths included, so
a folder whose rooms sit on both sides of another folder shows as a circle.

``python tests/import_graph.py`` prints the numbers as JSON (rooms, floors, arrows, circles, upward
arrows); ``--markdown`` prints (``--write`` rewrites in place) the block ``docs/architecture.md`` carries between its ``import-graph``
markers (a test keeps them equal).
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "ares_cli"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# Rooms by floor, bottom first, named relative to the package ("__init__" is ares_cli/__init__.py). A room
# imports only rooms on lower floors.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "console"),
    ("config", "pipeline", "store", "scoring", "grading"),
    ("algorithms", "data"),
    ("models", "report"),
    ("generation", "rehearsal", "toy", "training"),
    ("training.rl",),
    ("stages",),
    ("planning",),
    ("commands",),
    ("main",),
)

# Compatibility paths: old module -> its new home, and names re-exported by a module they left. Only code
# outside the project (and the public-API test) may import through them.
COMPAT_MODULES: dict[str, str] = {
    "ares_cli.algorithms.aggregation": "ares_cli.algorithms.loss_aggregation",
    "ares_cli.scoring.aggregations": "ares_cli.scoring.benchmark_scores",
    "ares_cli.grading.judged": "ares_cli.grading.judge_grading",
}
COMPAT_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ares_cli.algorithms.aepo": (
        "ares_cli.algorithms.buckets",
        ("BUCKETS", "EASY", "HARD", "MEDIUM", "bucket_bounds", "bucket_ids", "difficulty_bucket"),
    ),
}


@dataclass(frozen=True)
class Import:
    """One import statement's target as written: ``importer`` imports ``target`` (``names`` from it)."""

    importer: str
    target: str
    names: tuple[str, ...]
    line: int


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the package (``pkg/__init__.py`` -> ``pkg``)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def packages(modules: Mapping[str, Path]) -> set[str]:
    """The dotted names that are packages (an ``__init__.py``)."""
    return {name for name, path in modules.items() if path.name == "__init__.py"}


def room_of(module: str, pkgs: set[str]) -> str:
    """The room of a module: its package when it lives in a subpackage, else itself at the top."""
    if module in pkgs:
        return module
    parent = module.rpartition(".")[0]
    return module if parent == PACKAGE else parent


def _resolve(importer: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=4096)
def _import_nodes(path: Path, mtime_ns: int, size: int) -> tuple[ast.Import | ast.ImportFrom, ...]:  # noqa: ARG001
    """The import statements of one file, parsed once per version of the file (the key holds its
    modification time and size), since every check walks the same files."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return tuple(node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def imports(
    modules: Mapping[str, Path] | None = None, files: Mapping[str, Path] | None = None
) -> Iterator[Import]:
    """Every import of a project module (one of ``modules``) by one of ``files`` (default: the modules
    themselves; tests or scripts by any dotted name), wherever in the file it stands."""
    modules = module_files() if modules is None else modules
    pkgs = packages(modules)
    for name, path in (modules if files is None else files).items():
        stat = path.stat()
        for node in _import_nodes(path, stat.st_mtime_ns, stat.st_size):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        yield Import(name, alias.name, (), node.lineno)
            else:
                target = _resolve(name, name in pkgs, node)
                if target.split(".")[0] != PACKAGE:
                    continue
                names = tuple(a.name for a in node.names)
                submodules = [n for n in names if f"{target}.{n}" in modules]
                for sub in submodules:  # ``from pkg import module`` imports the module
                    yield Import(name, f"{target}.{sub}", (), node.lineno)
                rest = tuple(n for n in names if n not in submodules)
                if rest or not submodules:
                    yield Import(name, target, rest, node.lineno)


def short_name(room: str) -> str:
    """``ares_cli.training.rl`` -> ``training.rl``; the root package -> ``__init__``."""
    return "__init__" if room == PACKAGE else room.removeprefix(PACKAGE + ".")


def module_graph(
    modules: Mapping[str, Path] | None = None, *, skip: set[str] = frozenset()
) -> dict[str, set[str]]:
    """Module -> the project modules it imports (targets that are not modules are kept as written);
    ``skip``: modules left out as importers (the compatibility paths)."""
    modules = module_files() if modules is None else modules
    graph: dict[str, set[str]] = {name: set() for name in modules if name not in skip}
    for imp in imports(modules):
        if imp.target != imp.importer and imp.importer not in skip:
            graph[imp.importer].add(imp.target)
    return graph


def room_graph(
    modules: Mapping[str, Path] | None = None, *, skip: set[str] = frozenset()
) -> dict[str, set[str]]:
    """Room -> the other rooms it imports (``skip`` as in :func:`module_graph`)."""
    modules = module_files() if modules is None else modules
    pkgs = packages(modules)
    graph: dict[str, set[str]] = {}
    for src, targets in module_graph(modules, skip=skip).items():
        room = room_of(src, pkgs)
        graph.setdefault(room, set())
        for dst in targets:
            other = room_of(dst, pkgs)
            if other != room:
                graph[room].add(other)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def floors(graph: Mapping[str, set[str]]) -> dict[str, int]:
    """Longest-path floor of each node (0: imports nothing); nodes in a circle share their circle's floor."""
    members = {node: tuple(c) for c in cycles(graph) for node in c}
    memo: dict[str, int] = {}

    def floor(node: str) -> int:
        if node not in memo:
            memo[node] = 0  # guards the recursion inside a circle
            group = members.get(node, (node,))
            below = [t for n in group for t in graph.get(n, ()) if t in graph and t not in group]
            value = max((floor(t) + 1 for t in below), default=0)
            for n in group:
                memo[n] = value
        return memo[node]

    return {node: floor(node) for node in sorted(graph)}


def upward_arrows(
    modules: Mapping[str, Path] | None = None,
    plan: tuple[tuple[str, ...], ...] = FLOORS,
    skip: Iterable[str] = COMPAT_MODULES,
) -> list[str]:
    """Each import whose room is not on a higher floor than the imported room, as ``module:line`` text (a
    room missing from ``plan`` is on floor -1, so its own imports are reported)."""
    modules = module_files() if modules is None else modules
    pkgs = packages(modules)
    floor = {room: level for level, rooms in enumerate(plan) for room in rooms}
    skip = set(skip)
    out = []
    for imp in imports(modules):
        if imp.importer in skip:
            continue
        src, dst = (short_name(room_of(m, pkgs)) for m in (imp.importer, imp.target))
        if src != dst and floor.get(src, -1) <= floor.get(dst, -1):
            out.append(f"{imp.importer}:{imp.line} imports {imp.target} ({src} -> {dst})")
    return out


def compat_imports(
    files: Mapping[str, Path],
    modules: Mapping[str, Path] | None = None,
    compat_modules: Mapping[str, str] = COMPAT_MODULES,
    compat_names: Mapping[str, tuple[str, tuple[str, ...]]] = COMPAT_NAMES,
) -> list[str]:
    """Each import in ``files`` that goes through a compatibility path, with where to import from instead."""
    out = []
    for imp in imports(modules, files):
        if imp.importer in compat_modules:
            continue
        if imp.target in compat_modules:
            out.append(f"{imp.importer}:{imp.line} imports {imp.target}; use {compat_modules[imp.target]}")
        new, names = compat_names.get(imp.target, ("", ()))
        moved = sorted(set(imp.names) & set(names))
        if moved:
            out.append(f"{imp.importer}:{imp.line} imports {moved} from {imp.target}; use {new}")
    return out


def folder_of(module: str) -> str:
    """The top-level folder (or top module) a module lives in: ``ares_cli.training.rl.x`` -> ``ares_cli.training``."""
    return ".".join(module.split(".")[:2])


def folder_graph(modules: Mapping[str, Path] | None = None) -> dict[str, set[str]]:
    """Folder -> the other folders it imports, every module counted (the compatibility paths too)."""
    out: dict[str, set[str]] = {}
    for src, targets in module_graph(modules).items():
        out.setdefault(folder_of(src), set()).update(
            folder_of(t) for t in targets if folder_of(t) != folder_of(src)
        )
    return out


def backward_arrows(graph: Mapping[str, set[str]]) -> list[str]:
    """The arrows that run back up: each arrow between two nodes of one circle (no layering can point all of
    them down), as ``src -> dst``."""
    members = {node: i for i, c in enumerate(cycles(graph)) for node in c}
    return sorted(
        f"{short_name(src)} -> {short_name(dst)}"
        for src, targets in graph.items()
        for dst in targets
        if src in members and members[src] == members.get(dst)
    )


def function_lines(module: str, name: str) -> int:
    """How many lines the top-level function ``name`` of ``module`` spans, decorators and docstring included."""
    tree = ast.parse(module_files()[module].read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1


def measure() -> dict[str, object]:
    """Rooms, floors, arrows, circles and upward arrows of the package as it is on disk: rooms with the
    compatibility paths left out; upward arrows per import statement against ``FLOORS`` (the compatibility
    paths counted apart) and between top-level folders."""
    modules = module_files()
    rooms = room_graph(modules, skip=set(COMPAT_MODULES))
    folders = folder_graph(modules)
    levels = floors(rooms)
    upward = upward_arrows(modules)
    return {
        "modules": len(modules),
        "rooms": len(rooms),
        "floors": max(levels.values()) + 1,
        "arrows": sum(len(t) for t in rooms.values()),
        "room_circles": cycles(rooms),
        "module_circles": cycles(module_graph(modules)),
        "upward_arrows": upward,
        "compat_upward_arrows": [a for a in upward_arrows(modules, skip=()) if a not in upward],
        "folders": len(folders),
        "folder_arrows": sum(len(t) for t in folders.values()),
        "folder_circles": cycles(folders),
        "folder_upward_arrows": backward_arrows(folders),
        "floor_of": {short_name(room): level for room, level in levels.items()},
        "imports_of": {short_name(r): sorted(short_name(t) for t in ts) for r, ts in sorted(rooms.items())},
        "loop_lines": {
            "train_rl": function_lines(f"{PACKAGE}.training.rl.trainer", "train_rl"),
            "train_sft": function_lines(f"{PACKAGE}.training.sft", "train_sft"),
        },
    }


BEGIN = "<!-- import-graph: begin (printed by `python tests/import_graph.py --markdown`; do not edit) -->"
END = "<!-- import-graph: end -->"


def markdown(numbers: Mapping[str, object] | None = None) -> str:
    """The block of ``docs/architecture.md`` between :data:`BEGIN` and :data:`END`: the counts, then one row
    per room (its floor, its modules, the rooms it imports), top floor first."""
    m = measure() if numbers is None else numbers
    modules = module_files()
    pkgs = packages(modules)
    size: dict[str, int] = {}
    for name in modules:
        if name not in COMPAT_MODULES:
            room = short_name(room_of(name, pkgs))
            size[room] = size.get(room, 0) + 1
    upward = len(m["upward_arrows"]) + len(m["compat_upward_arrows"])
    lines = [
        BEGIN,
        "",
        f"Measured: {m['modules']} modules, {m['rooms']} rooms, {m['floors']} floors, {m['arrows']} arrows "
        f"between rooms. Circles: {len(m['room_circles'])} between rooms, {len(m['module_circles'])} between "
        f"modules, {len(m['folder_circles'])} between the {m['folders']} top-level folders ({m['folder_arrows']} "
        f"arrows). Upward arrows: {upward} between rooms (compatibility paths counted), "
        f"{len(m['folder_upward_arrows'])} between folders. Loop lengths: `train_rl` "
        f"{m['loop_lines']['train_rl']} lines, `train_sft` {m['loop_lines']['train_sft']}.",
        "",
        "| floor | room | modules | imports |",
        "| --- | --- | --- | --- |",
    ]
    for room, level in sorted(m["floor_of"].items(), key=lambda kv: (-kv[1], kv[0])):
        targets = ", ".join(f"`{t}`" for t in m["imports_of"][room]) or "nothing"
        lines.append(f"| {level} | `{room}` | {size.get(room, 0)} | {targets} |")
    return "\n".join([*lines, "", END])


def write_doc(doc: Path) -> None:
    """Replace the block between :data:`BEGIN` and :data:`END` in ``doc`` with :func:`markdown`'s."""
    text = doc.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(head + markdown() + tail, encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        write_doc(Path(__file__).resolve().parents[1] / "docs" / "architecture.md")
    else:
        print(markdown() if sys.argv[1:] == ["--markdown"] else json.dumps(measure(), indent=1))
