"""No code from pipeline files: a shared pipeline file reaches neither the shell nor Make, writes only under
its state directory, and its values reach the command line as literal words (the rest of the no-code-from-
data tests are in ``test_hostile_code.py``)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# -- pipeline files reach neither the shell nor Make, and write only under the state dir ----------------

BAD_PIPELINES = [
    ("quote-in-stage-name", {"x'`touch ${IFS}{marker}`'": {"run": "toy init"}}, "is not an identifier"),
    ("stage-name-escapes", {"../../../../{tmp_name}/escaped": {"run": "passrate", "config": {"k": 2}}},
     "is not an identifier"),
    ("stage-name-dollar", {"$(shell touch {marker})": {"run": "toy init"}}, "is not an identifier"),
    ("arg-key-injection", {"pr": {"run": "passrate", "args": {"data x; touch {marker}": "y"}}},
     "option name 'data x; touch"),
    ("newline-in-value", {"pr": {"run": "passrate", "args": {"data": "x\nall:\n\ttouch {marker}"}}},
     "contains a control character"),
    ("trust-in-args", {"pr": {"run": "passrate", "args": {"data": "x", "trust_grader_code": True}}},
     "only on the command line"),
    ("trust-dashed", {"pr": {"run": "passrate", "args": {"data": "x", "trust-grader-code": True}}},
     "only on the command line"),
    ("trust-in-set", {"pr": {"run": "rl", "args": {"set": ["grading.trust_grader_code=true"]}}},
     "only on the command line"),
    ("nested-value", {"pr": {"run": "passrate", "args": {"data": {"a": 1}}}}, "expected a scalar"),
    ("argv-newline", {"tw": {"run": "toy twin", "argv": ["x\n\ttouch {marker}"]}}, "contains a control character"),
    ("path-climbs-out-of-its-artifact",
     {"base": {"run": "toy init"}, "pr": {"run": "passrate", "args": {"model": "@base/../../../{tmp_name}"}}},
     "leaves the artifact of its stage"),
]  # fmt: skip


def _pipeline_file(tmp: Path, stages: dict, **top) -> Path:
    import yaml

    text = json.dumps({**top, "stages": stages})
    for key, value in {"{marker}": str(tmp / "pwned"), "{tmp_name}": tmp.name}.items():
        text = text.replace(key, value)
    path = tmp / "shared-pipeline.yaml"
    path.write_text(yaml.safe_dump(json.loads(text)))
    return path


def _tree(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*")}


@pytest.mark.parametrize(
    ("stages", "fragment"), [c[1:] for c in BAD_PIPELINES], ids=[c[0] for c in BAD_PIPELINES]
)
def test_a_pipeline_file_cannot_inject_code_or_paths(tmp_path, stages, fragment):
    from ares_cli.pipeline import main

    work = tmp_path / "deep" / "er" / "work"
    work.mkdir(parents=True)
    path = _pipeline_file(work, stages)
    before = _tree(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "ares_cli.pipeline", "render", str(path), "--state", str(work / "state")],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 2, text
    assert fragment in text and str(path) in text
    assert _tree(tmp_path) == before  # nothing written, inside the state directory or out of it
    assert not (work / "pwned").exists()
    assert main(["render", str(path), "--state", str(work / "state")]) == 2


def test_artifacts_root_from_a_pipeline_file_is_a_plain_path(tmp_path):
    path = _pipeline_file(tmp_path, {"base": {"run": "toy init"}}, artifacts_root="$(shell touch {marker})")
    from ares_cli.pipeline import main

    assert main(["render", str(path), "--state", str(tmp_path / "state")]) == 2
    assert not (tmp_path / "state").exists() and not (tmp_path / "pwned").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_values_reach_the_command_line_as_literal_words(tmp_path):
    """Shell and Make metacharacters in values are passed through as text: what ``make -n`` would run
    splits (as the shell splits it) into exactly the words the YAML holds, and nothing runs."""
    from ares_cli.pipeline import render

    marker = tmp_path / "pwned"
    values = {
        "data": f"$(shell touch {marker})",
        "system_prompt": f'it\'s `touch {marker}` $HOME; rm -rf / # "x" \\',
        "prompt_template": "{problem} $$ $(ARES) ${PATH} % : = #",
    }
    twin = f"$(shell touch {marker}) `touch {marker}`"
    path = _pipeline_file(tmp_path, {"base": {"run": "toy init"}, "tw": {"run": "toy twin", "argv": [twin]},
                                     "pr": {"run": "passrate", "args": {"model": f"@base/model dir/$(shell touch {marker})'", **values}}})  # fmt: skip
    makefile = render(path, tmp_path / "state", ares="ares")
    dry = subprocess.run(
        ["make", "-n", "-f", str(makefile), "all"], capture_output=True, text=True, check=True
    )
    line = next(ln for ln in dry.stdout.splitlines() if ln.startswith("ares --json passrate"))
    words = shlex.split(line.split(" > ")[0])
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        assert words[words.index(flag) + 1] == value
    state = tmp_path / "state"
    model = words[words.index("--model") + 1]
    assert model == f"$(cat {state}/base.id)/model dir/$(shell touch {marker})'"  # the shell runs only cat
    twin_line = next(ln for ln in dry.stdout.splitlines() if ln.startswith("ares --json toy twin"))
    assert shlex.split(twin_line.split(" > ")[0])[4] == twin
    assert not marker.exists()
