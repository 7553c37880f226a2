"""Pipelines as Make: ``pipelines/<name>.yaml`` → one Make target per stage.

Each stage's config goes to ``<state>/<stage>.yaml`` and its artifact path to ``<state>/<stage>.id``; both
files are rewritten only when their content changes, so Make reruns a stage only when its own config or an
upstream artifact changed, and the stage itself answers "up to date" when nothing did::

    python -m ares_cli.pipeline render pipelines/toy.yaml --state build/pipelines/toy
    make -f build/pipelines/toy/Makefile all
    ares report pipeline build/pipelines/toy     # stage times + comparison (ares report html: a page)

A stage entry: ``run`` (the verb, e.g. ``passrate`` or ``toy init``), ``argv`` (positional words after the
verb, e.g. a twin's name), ``args`` (CLI options; a value ``@other`` is the artifact path of stage
``other``, ``@other/model`` a path inside it), ``recipe`` (a YAML config file, e.g. ``pipelines/rl/paec-qwen2.5-math-1.5b.yaml``, under
``config``) and ``config`` (keys over the recipe's; the merge is written to the stage's ``--config`` file).
Any other key, at the top (``name``, ``description``, ``notes``, ``artifacts_root``, ``stages``, ``report``) or in a
stage, is an InputError naming it: a misspelt key is never ignored.

A pipeline file is data that people share, so nothing in it reaches the shell or Make as code: stage names
and ``args`` keys are identifiers (anything else is a UsageError naming it), every value and ``argv`` word
on a recipe line is quoted for the shell and escaped for Make, values with control characters are refused,
a path inside an artifact (``@other/model``) cannot climb out of it, and every file ``render`` writes lies
inside the state directory. A file cannot grant a command-line-only opt-in (``--trust-grader-code``).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from ares_cli.errors import AresError, InputError, UsageError

VERBS = ("toy init", "toy twin", "passrate", "curate", "sft", "rl", "eval")
CONFIG_VERBS = ("passrate", "curate", "sft", "rl", "eval")
ARGV_VERBS = ("toy twin",)  # the verbs that take positional words (a twin's name)
STAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")  # a Make target and a file name in the state dir
TOP_KEYS = ("name", "description", "notes", "artifacts_root", "stages", "report")
STAGE_KEYS = ("run", "argv", "args", "recipe", "config", "notes")
ARG_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")  # becomes --key-with-dashes
# Opt-ins that run code: only the person at the command line may give them, never a shared file.
COMMAND_LINE_ONLY = ("trust_grader_code",)
# A path that goes into the Makefile as a target or a variable (no quoting or escaping needed there).
MAKE_SAFE_PATH = re.compile(r"[A-Za-z0-9_./~+@=,-]+")


def load_pipeline(path: str | Path) -> dict[str, Any]:
    """Read and validate a pipeline file: known verbs, references to earlier stages only."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError("pipeline file not found", file=path)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text ({err.reason} at byte {err.start})", file=path) from None
    except yaml.YAMLError as err:
        raise InputError(f"invalid YAML ({err})", file=path) from None
    if not isinstance(spec, dict):
        raise InputError("expected a mapping at the top level", file=path)
    for key in spec:
        if key not in TOP_KEYS:  # a misspelt key would be ignored without a word
            raise InputError(f"unknown key (allowed: {', '.join(TOP_KEYS)})", file=path, field=str(key))
    stages = spec.get("stages")
    if not isinstance(stages, dict) or not stages:
        raise InputError("expected a non-empty 'stages' mapping", file=path, field="stages")
    root = spec.get("artifacts_root", "artifacts")
    if not isinstance(root, str) or not MAKE_SAFE_PATH.fullmatch(root):
        raise UsageError(
            f"{path}: field 'artifacts_root': {root!r} must be a plain path (letters, digits, '_./~+@=,-')"
        )
    seen: list[str] = []
    for name, stage in stages.items():
        if not isinstance(name, str) or not STAGE_NAME.fullmatch(name):
            raise UsageError(
                f"{path}: stage name {name!r} is not an identifier (a letter or '_', then up to 99 letters, "
                "digits, '_' or '-'): it becomes a Make target and a file name"
            )
        if not isinstance(stage, dict) or stage.get("run") not in VERBS:
            raise InputError(
                f"'run' must be one of {', '.join(VERBS)}", file=path, field=f"stages.{name}.run"
            )
        for key in stage:
            if key not in STAGE_KEYS:
                raise InputError(
                    f"unknown key (allowed: {', '.join(STAGE_KEYS)})", file=path, field=f"stages.{name}.{key}"
                )
        if not isinstance(stage.get("config") or {}, dict):
            raise InputError("must be a mapping of config keys", file=path, field=f"stages.{name}.config")
        args = stage.get("args") or {}
        if not isinstance(args, dict):
            raise InputError("must be a mapping of option: value", file=path, field=f"stages.{name}.args")
        argv = stage.get("argv") or []
        if argv and stage["run"] not in ARGV_VERBS:
            raise InputError("this verb takes no positional words", file=path, field=f"stages.{name}.argv")
        for word in argv if isinstance(argv, list) else [argv]:
            _check_value(path, f"stages.{name}.argv", word)
        for key, value in args.items():
            _check_arg(path, name, key, value)
            for ref in _refs(value):
                if ref not in seen:
                    raise InputError(
                        f"'@{ref}' is not an earlier stage", file=path, field=f"stages.{name}.args.{key}"
                    )
        for key in ("config", "recipe"):
            if stage.get(key) and stage["run"] not in CONFIG_VERBS:
                raise InputError("this verb takes no config", file=path, field=f"stages.{name}.{key}")
        if stage.get("recipe") and not Path(stage["recipe"]).is_file():
            raise InputError("recipe file not found", file=path, field=f"stages.{name}.recipe")
        seen.append(name)
    report = spec.get("report") or {}
    compare = report.get("compare") or {} if isinstance(report, dict) else None
    if not isinstance(compare, dict) or set(report) - {"compare"}:
        raise InputError("must be a mapping {compare: {label: stage}}", file=path, field="report")
    for label, stage_name in compare.items():
        if stage_name not in stages:
            raise InputError(f"{stage_name!r} is not a stage", file=path, field=f"report.compare.{label}")
    return spec


def _check_value(path: Path, where: str, item: Any) -> None:
    """A value that becomes one word of a recipe line: a scalar without control characters."""
    if isinstance(item, (dict, list)) or item is None:
        raise UsageError(f"{path}: field '{where}': expected a scalar or a list of scalars")
    if any(ord(c) < 32 or ord(c) == 127 for c in str(item)):
        raise UsageError(
            f"{path}: field '{where}': {str(item)!r} contains a control character (a newline would end the "
            "Make recipe line)"
        )


def _check_arg(path: Path, stage: str, key: Any, value: Any) -> None:
    """An ``args`` entry: an identifier key, scalar values without control characters, ``@stage/sub`` paths
    that stay inside the artifact, no command-line-only opt-in."""
    where = f"stages.{stage}.args"
    if not isinstance(key, str) or not ARG_KEY.fullmatch(key):
        raise UsageError(
            f"{path}: field '{where}': option name {key!r} is not an identifier (a letter, then letters, "
            "digits, '_' or '-')"
        )
    values = value if isinstance(value, list) else [value]
    for item in values:
        _check_value(path, f"{where}.{key}", item)
        if isinstance(item, str) and item.startswith("@") and "/" in item:
            inner = PurePosixPath(item.split("/", 1)[1])
            if inner.is_absolute() or ".." in inner.parts or "\\" in str(inner):
                raise UsageError(f"{path}: field '{where}.{key}': {item!r} leaves the artifact of its stage")
    refused = [key.replace("-", "_")] + [
        str(v).split("=", 1)[0].strip().rsplit(".", 1)[-1] for v in values if key == "set"
    ]
    for name in refused:
        if name in COMMAND_LINE_ONLY:
            raise UsageError(
                f"{path}: field '{where}.{key}': {name} can be given only on the command line, never by a "
                "pipeline file (it allows running code the file names)"
            )


def _refs(value: Any) -> list[str]:
    """Stages an arg refers to: ``@stage``, or ``@stage/sub/path`` (a path inside that stage's artifact)."""
    values = value if isinstance(value, list) else [value]
    return [v[1:].split("/", 1)[0] for v in values if isinstance(v, str) and v.startswith("@")]


def stage_config(stage: dict[str, Any]) -> dict[str, Any]:
    """A stage's config: its ``recipe`` file (the verb's section where the file has one) with ``config``
    merged over it, key by key."""
    recipe: dict[str, Any] = {}
    if stage.get("recipe"):
        import yaml

        path = Path(stage["recipe"])
        try:
            recipe = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise InputError(f"unreadable recipe ({err})", file=path) from None
        if not isinstance(recipe, dict):
            raise InputError("expected a mapping at the top level", file=path)
        if isinstance(recipe.get(stage["run"]), dict):  # an `rl:` section, as the verb's --config reads it
            recipe = recipe[stage["run"]]
    return _merge(recipe, stage.get("config") or {})


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if nested else value
    return out


def _write_if_changed(path: Path, text: str, *, inside: Path | None = None) -> None:
    if inside is not None and not path.resolve().is_relative_to(inside.resolve()):
        raise UsageError(f"refusing to write {path}: it is outside the state directory {inside}")
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _arg_words(key: str, value: Any, state: str) -> list[str]:
    flag = "--" + key.replace("_", "-")
    values = value if isinstance(value, list) else [value]
    words: list[str] = []
    for item in values:
        if isinstance(item, bool):
            words += [flag] if item else []
        elif isinstance(item, str) and item.startswith("@"):
            ref, _, sub = item[1:].partition("/")
            words += [flag, f'"$$(cat {state}/{ref}.id)"' + (make_word("/" + sub) if sub else "")]
        else:
            words += [flag, make_word(str(item))]
    return words


def make_word(text: str) -> str:
    """``text`` as one shell word on a Make recipe line: shell-quoted, then ``$`` doubled so that Make
    passes it through literally (``$(shell ...)`` stays text)."""
    return shlex.quote(text).replace("$", "$$")


def render(path: str | Path, state: str | Path, *, ares: str = "ares", python: str = sys.executable) -> Path:
    """Write ``<state>/Makefile`` and the per-stage config files; returns the Makefile path."""
    import yaml

    spec = load_pipeline(path)
    state = Path(state)
    for what, value in (("--state", str(state)), ("--ares", ares), ("python", python)):
        if any(ord(c) < 32 for c in value) or (what == "--state" and not MAKE_SAFE_PATH.fullmatch(value)):
            raise UsageError(f"{what} {value!r}: use a plain path (letters, digits, '_./~+@=,-') for Make")
    root = spec.get("artifacts_root", "artifacts")
    lines = [
        f"# Generated from {ascii(str(path))} by ares_cli.pipeline; edit the YAML, not this file.",
        f"ARES ?= {ares}",
        f"PYTHON ?= {python}",
        f"ARES_ARTIFACTS ?= {root}",
        "export ARES_ARTIFACTS",
        "",
        f"all: {' '.join(f'{state}/{n}.id' for n in spec['stages'])}",
        "",
    ]
    for name, stage in spec["stages"].items():
        deps = [f"{state}/{ref}.id" for value in (stage.get("args") or {}).values() for ref in _refs(value)]
        words = [
            "$(ARES)",
            "--json",
            *stage["run"].split(),
            *(make_word(str(word)) for word in _as_list(stage.get("argv"))),
        ]
        if stage["run"] in CONFIG_VERBS:
            config_file = state / f"{name}.yaml"
            _write_if_changed(config_file, yaml.safe_dump(stage_config(stage), sort_keys=True), inside=state)
            deps.insert(0, str(config_file))
            words += ["--config", str(config_file)]
        for key, value in (stage.get("args") or {}).items():
            words += _arg_words(key, value, str(state))
        target = f"{state}/{name}.id"
        lines += [
            f"{target}: {' '.join(dict.fromkeys(deps))}",
            f"\t@echo '== {name}: ares {stage['run']}' >&2",
            f"\t{' '.join(words)} > {target}.json",
            f"\t$(PYTHON) -m ares_cli.pipeline stamp {target}.json {target}",
            "",
        ]
    lines += [".PHONY: all", ""]
    makefile = state / "Makefile"
    _write_if_changed(makefile, "\n".join(lines), inside=state)
    # the spec beside its state, for `ares report pipeline|html <state>` (not a Make prerequisite)
    _write_if_changed(state / "pipeline.yaml", Path(path).read_text(), inside=state)
    return makefile


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def stamp(result_json: str | Path, id_file: str | Path) -> str:
    """Record a stage's artifact path (from its ``--json`` result) in ``id_file``, only if it changed."""
    result = json.loads(Path(result_json).read_text())
    _write_if_changed(Path(id_file), result["path"] + "\n")
    return result["path"]


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ares_cli.pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render", help="write the Makefile and per-stage configs")
    r.add_argument("pipeline")
    r.add_argument("--state", required=True)
    r.add_argument("--ares", default="ares")
    s = sub.add_parser("stamp", help="record a stage's artifact path")
    s.add_argument("result_json")
    s.add_argument("id_file")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "render":
            print(render(args.pipeline, args.state, ares=args.ares))
        else:
            stamp(args.result_json, args.id_file)
    except AresError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
