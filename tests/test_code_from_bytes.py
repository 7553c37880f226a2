"""The package never runs code from bytes: an ``ast`` scan of ``ares_cli/`` for pickle, ``torch.load``
without ``weights_only``, unsafe ``yaml.load``, ``eval``/``exec``/``compile`` and ``shell=True``, with a
test of the scanner itself, and the one place that imports modules by name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ares_cli"


def _code_from_bytes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each construct that can run code from data."""
    found = []
    unpicklers = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] in unpicklers
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in unpicklers:
            found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Call):
            func, keywords = node.func, {k.arg: k.value for k in node.keywords}
            name = ast.unparse(func)
            if isinstance(func, ast.Name) and func.id in ("eval", "exec", "compile"):
                found.append((node.lineno, f"{func.id}()"))
            if name in ("os.system", "os.popen", "yaml.unsafe_load", "yaml.full_load", "yaml.load_all"):
                found.append((node.lineno, name))
            if name == "yaml.load" and ast.unparse(keywords.get("Loader", ast.Constant(None))) not in (
                "yaml.SafeLoader", "yaml.CSafeLoader"
            ):  # fmt: skip
                found.append((node.lineno, "yaml.load without a safe loader"))
            if name.endswith("torch.load"):
                weights_only = keywords.get("weights_only")
                if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                    found.append((node.lineno, "torch.load without weights_only=True"))
            shell = keywords.get("shell")
            if shell is not None and not (isinstance(shell, ast.Constant) and shell.value is False):
                found.append((node.lineno, f"{name}(shell=...)"))
            if name in ("numpy.load", "np.load") and "allow_pickle" in keywords:
                allow = keywords["allow_pickle"]
                if not (isinstance(allow, ast.Constant) and allow.value is False):
                    found.append((node.lineno, f"{name}(allow_pickle=...)"))
    return found


def test_the_detector_finds_what_it_looks_for():
    sample = (
        "import pickle\nfrom dill import loads\nimport torch, yaml, subprocess, os\neval('1')\nexec('x=1')\n"
        "torch.load('m.pt')\ntorch.load('m.pt', weights_only=False)\nyaml.load(s)\n"
        "yaml.load(s, Loader=yaml.Loader)\nyaml.unsafe_load(s)\nsubprocess.run('ls', shell=True)\n"
        "os.system('ls')\nnp.load('x.npy', allow_pickle=True)\n"
        "ok = [torch.load('m.pt', weights_only=True), yaml.safe_load(s), yaml.load(s, Loader=yaml.SafeLoader),"
        " subprocess.run(['ls']), model.eval(), np.load('x.npy'), np.load('y', allow_pickle=False)]\n"
    )
    lines = sorted({line for line, _ in _code_from_bytes(ast.parse(sample))})
    assert lines == [1, 2, *range(4, 14)], _code_from_bytes(ast.parse(sample))


def test_no_pickle_eval_exec_unsafe_yaml_or_shell_in_the_package():
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offences += [
            f"{path.relative_to(PACKAGE.parent)}:{line}: {what}" for line, what in _code_from_bytes(tree)
        ]
    assert not offences, "\n".join(offences)


def test_only_the_registry_imports_modules_by_name():
    """``importlib.import_module`` / ``__import__`` with a non-literal name: only where a name is checked
    first (the grader and algorithm registries and the grading workers, which import what a registry
    resolved; the config docs and the verb table, whose names are written in the package)."""
    allowed = {
        "grading/registry.py",
        "grading/worker.py",
        "algorithms/registry.py",
        "report/config_docs.py",
        "commands/stages.py",
    }
    users = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                "importlib.import_module", "__import__", "import_module"
            ):  # fmt: skip
                users.add(path.relative_to(PACKAGE).as_posix())
    assert users <= allowed, users - allowed
