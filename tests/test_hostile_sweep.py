"""A careless user's sweep over every surface, through the CLI: data files and manifests,
``--set`` and ``--config``, suites, model and artifact references, RL and sampling options, reports.

Each case exits with its documented code (2 usage, 3 invalid input) and a message naming the file, row,
field or flag, before any model loads; no stage leaves a partial directory behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from input_rows import one_plus_one as _problem
from input_rows import write_jsonl as _jsonl
from typer.testing import CliRunner

from ares_cli.main import app

TOY = Path(__file__).resolve().parents[1] / "ares_cli" / "toy" / "base"


def _manifest(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.yaml").write_text(f"name: {name}\ndescription: d\nlicence: MIT\n{body}")


def _suite(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.yaml").write_text(f"name: {name}\ndescription: d\n{body}")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("sweep")
    data = _jsonl(tmp / "problems.jsonl", [_problem("p1"), _problem("p2"), _problem("p3")])
    (tmp / "empty.jsonl").write_text("")
    (tmp / "binary.jsonl").write_bytes(b"\x00\xff\xfe\x00garbage")
    (tmp / "broken.jsonl").write_text('{"id": "p1", "problem": \n')
    (tmp / "list.jsonl").write_text("[1, 2]\n")
    (tmp / "table.csv").write_text("id,problem\n1,x\n")
    (tmp / "cfg_unknown.yaml").write_text("k: 2\nnosuch: 3\n")
    (tmp / "cfg_list.yaml").write_text("- k\n")
    manifests = tmp / "manifests"
    manifests.mkdir()
    local = f"source: {{local: {{path: {data}}}}}\n"
    _manifest(manifests, "no_source", "grader: math\n")
    _manifest(manifests, "passwd_source", "source: {local: {path: /etc/passwd}}\ngrader: math\n")
    _manifest(manifests, "unknown_key", f"{local}fields: {{problem: q}}\ngrader: math\n")
    _manifest(manifests, "expects_more", f"{local}expected_rows: 99\ngrader: math\n")
    _manifest(manifests, "empty_subset", f"{local}subset: {{nosuch: 1}}\ngrader: math\n")
    _manifest(manifests, "hf_no_split", "source: {hf: {id: '../../etc'}}\ngrader: math\n")
    _manifest(manifests, "rules_plus_path", f"{local}grader: 'rich:os.system+judge'\n")
    (manifests / "renamed.yaml").write_text(
        f"name: other\ndescription: d\nlicence: MIT\n{local}grader: math\n"
    )
    suites = tmp / "suites"
    suites.mkdir()
    one = "{bench: toy-test, label: t, k: 1, metrics: [avg]}"
    _suite(suites, "no_benches", "")
    _suite(suites, "benches_text", "benches: toy-test\n")
    _suite(suites, "bench_number", "benches: [{bench: 5, label: t, k: 1, metrics: [avg]}]\n")
    _suite(suites, "bad_metric", "benches: [{bench: toy-test, label: t, k: 1, metrics: [best]}]\n")
    _suite(suites, "k_text", "benches: [{bench: toy-test, label: t, k: two, metrics: [avg]}]\n")
    _suite(suites, "same_label", f"benches: [{one}, {{bench: toy-val, label: t, k: 1, metrics: [avg]}}]\n")
    _suite(suites, "label_list", "benches: [{bench: toy-test, label: [a], k: 1, metrics: [avg]}]\n")
    _suite(suites, "extra_key", "benches: [{bench: toy-test, label: t, k: 1, metrics: [avg], run: x}]\n")
    _suite(suites, "eval_unknown", f"eval: {{nosuch: 1}}\nbenches: [{one}]\n")
    _suite(suites, "same_bench", f"benches: [{one}, {one.replace('label: t', 'label: u')}]\n")
    (suites / "bad_yaml.yaml").write_text("name: bad_yaml\n  description: [d\n")
    (suites / "a_list.yaml").write_text("- a\n- b\n")
    (suites / "renamed.yaml").write_text(f"name: other\ndescription: d\nbenches: [{one}]\n")
    return {"tmp": tmp, "data": data, "manifests": manifests, "suites": suites,
            **{p.stem: p for p in tmp.glob("*.*")}}  # fmt: skip


M = ["--model", "m"]
DATA = ["--data", "{data}", *M]
TOY_DATA = ["--data", "{data}", "--model", str(TOY)]
CASES = [
    # data files
    ("empty-file", ["data", "check", "{empty}"], 3, ["empty.jsonl: the dataset has no rows"]),
    ("binary-file", ["data", "check", "{binary}"], 3, ["binary.jsonl: not UTF-8 text"]),
    ("malformed-json", ["data", "check", "{broken}"], 3, ["broken.jsonl, row 1: malformed JSON"]),
    ("row-not-an-object", ["data", "check", "{list}"], 3, ["list.jsonl, row 1: expected a JSON object, got list"]),
    ("csv", ["data", "check", "{table}"], 3, ["unsupported file type '.csv'"]),
    ("empty-samples", ["eval", "--data", "{data}", "--from-samples", "{empty}"], 3, ["empty.jsonl: no samples"]),
    ("problems-as-samples", ["eval", "--data", "{data}", "--from-samples", "{data}"], 3,
     ["problems.jsonl, row 1, field 'problem_id': expected a non-empty string, got None"]),
    ("malformed-rates", ["curate", "--passrates", "{broken}", "--data", "{data}"], 3, ["broken.jsonl, row 1: malformed JSON"]),
    ("choice-without-options", ["eval", "--data", "{data}", "--from-samples", "{data}", "--grader", "choice"], 3,
     ["problems.jsonl, row 1, field 'answer'", "choice: gold answer '2' is neither an option letter"]),
    # dataset manifests
    ("manifest-without-source", ["data", "check", "no_source"], 3,
     ["no_source.yaml, field 'source': must be a mapping with exactly one of 'hf' or 'local'"]),
    ("manifest-source-not-data", ["data", "check", "passwd_source"], 3,
     ["passwd_source.yaml, field 'source.local.path': unsupported file type ''"]),
    ("manifest-unknown-key", ["data", "check", "unknown_key"], 3, ["unknown_key.yaml, field 'fields': unknown key"]),
    ("manifest-row-count", ["data", "check", "expects_more"], 3,
     ["expects_more.yaml, field 'expected_rows': source has 3 rows, the manifest expects 99"]),
    ("manifest-empty-subset", ["data", "check", "empty_subset"], 3,
     ["empty_subset.yaml, field 'subset': no row matches the subset {{'nosuch': 1}}"]),
    ("manifest-hf-without-split", ["data", "check", "hf_no_split"], 3,
     ["hf_no_split.yaml, field 'source.hf.split': missing or not a string"]),
    ("manifest-rules-are-a-path", ["passrate", "--data", "rules_plus_path", "--model", str(TOY), "-k", "1"], 3,
     ["rules_plus_path.yaml, field 'grader'", "never a module path"]),
    ("manifest-renamed", ["data", "check", "renamed"], 3, ["renamed.yaml, field 'name': 'other' must equal the file name"]),
    # --set and --config
    ("set-without-equals", ["passrate", *DATA, "--set", "k"], 2, ["--set expects key=value, got 'k'"]),
    ("set-empty-int", ["passrate", *DATA, "--set", "k="], 2, ["config key 'k': expected an integer, got ''"]),
    ("set-float-for-int", ["passrate", *DATA, "--set", "k=2.5"], 2, ["config key 'k': expected an integer, got 2.5"]),
    ("set-unknown-key", ["passrate", *DATA, "--set", "nosuch=1"], 2, ["unknown config key 'nosuch'; valid keys:"]),
    ("set-section", ["passrate", *DATA, "--set", "judge=x"], 2, ["config key 'judge' is a section"]),
    ("set-template-without-problem", ["passrate", *TOY_DATA, "--set", "prompt_template=x"], 2,
     ["prompt template must contain '{{problem}}': 'x'"]),
    ("set-shard-out-of-range", ["passrate", *DATA, "--set", "shard=5/2"], 2, ["--shard 5/2: need 0 <= i < n"]),
    ("set-shard-text", ["passrate", *DATA, "--set", "shard=abc"], 2, ["--shard expects i/n (e.g. 0/4), got 'abc'"]),
    ("config-unknown-key", ["passrate", *DATA, "--config", "{cfg_unknown}"], 2,
     ["cfg_unknown.yaml: unknown config key 'nosuch'"]),
    ("config-is-a-folder", ["passrate", *DATA, "--config", "{tmp}"], 2, ["does not exist"]),
    ("config-not-a-mapping", ["passrate", *DATA, "--config", "{cfg_list}"], 2, ["cfg_list.yaml"]),
    ("grader-empty", ["passrate", *TOY_DATA, "--grader", ""], 2, ["unknown grader ''; valid graders:"]),
    ("grade-workers-negative", ["eval", *DATA, "--set", "grade_workers=-1"], 2,
     ["config key 'grade_workers': -1 is out of range (must be >= 1, <= 256)"]),
    # RL and SFT options
    ("rl-unknown-algo", ["rl", *DATA, "--algo", "nope"], 2, ["unknown RL algorithm 'nope'; valid: aepo"]),
    ("rl-group-of-one", ["rl", *DATA, "--set", "rollout.group_size=1"], 2,
     ["config key 'rollout.group_size': 1 is out of range (must be >= 2)"]),
    ("rl-clip-nan", ["rl", *DATA, "--set", "loss.clip_high=nan"], 2, ["config key 'loss.clip_high': nan is not a finite number"]),
    ("rl-temperature-negative", ["rl", *DATA, "--set", "rollout.temperature=-1"], 2, ["'rollout.temperature': -1.0 is out of range"]),
    ("rl-mini-batch", ["rl", *DATA, "--set", "optim.mini_batch_size=3", "--set", "rollout.prompts_per_step=2"], 2,
     ["rollout.prompts_per_step 2 is not a multiple of optim.mini_batch_size 3"]),
    ("rl-steps-zero", ["rl", *DATA, "--steps", "0"], 2, ["config key 'steps': 0 is out of range (must be >= 1)"]),
    ("rl-workers-huge", ["rl", *DATA, "--set", "grading.workers=100000"], 2, ["'grading.workers': 100000 is out of range"]),
    ("rl-unknown-tracker", ["rl", *DATA, "--report-to", "bogus"], 2, ["--report-to: unknown tracker 'bogus'"]),
    ("sft-unknown-key", ["sft", *DATA, "--set", "grad_accum=2"], 2, ["unknown config key 'grad_accum'"]),
    ("toy-seed-text", ["toy", "init", "--seed", "abc"], 2, ["Invalid value for '--seed'"]),
    # suites
    ("suite-without-benches", ["eval", "--suite", "{suites}/no_benches.yaml", *M], 3,
     ["no_benches.yaml, field 'benches': must be a non-empty list"]),
    ("suite-benches-text", ["eval", "--suite", "{suites}/benches_text.yaml", *M], 3, ["field 'benches': must be a non-empty list"]),
    ("suite-bench-number", ["eval", "--suite", "{suites}/bench_number.yaml", *M], 3,
     ["field 'benches[0].bench': missing (a manifest name or data source), got 5"]),
    ("suite-bad-metric", ["eval", "--suite", "{suites}/bad_metric.yaml", *M], 3,
     ["field 'benches[0].metrics': must be a non-empty list of avg, maj, pass@N, aggregate"]),
    ("suite-k-text", ["eval", "--suite", "{suites}/k_text.yaml", *M], 3, ["field 'benches[0].k': must be an integer in 1..4096, got 'two'"]),
    ("suite-same-label", ["eval", "--suite", "{suites}/same_label.yaml", *M], 3,
     ["same_label.yaml, field 'benches[1].label': label 't' is also the label of benches[0]"]),
    ("suite-label-list", ["eval", "--suite", "{suites}/label_list.yaml", *M], 3,
     ["field 'benches[0].label': must be a non-empty string, got ['a']"]),
    ("suite-extra-key", ["eval", "--suite", "{suites}/extra_key.yaml", *M], 3, ["field 'benches[0].run': unknown key"]),
    ("suite-same-bench", ["eval", "--suite", "{suites}/same_bench.yaml", *M], 3, ["a benchmark is listed twice"]),
    ("suite-eval-unknown-key", ["eval", "--suite", "{suites}/eval_unknown.yaml", *M], 2,
     ["eval_unknown.yaml: unknown config key 'nosuch'"]),
    ("suite-bad-yaml", ["eval", "--suite", "{suites}/bad_yaml.yaml", *M], 3, ["bad_yaml.yaml: invalid YAML"]),
    ("suite-a-list", ["eval", "--suite", "{suites}/a_list.yaml", *M], 3, ["a_list.yaml: a suite must be a YAML mapping"]),
    ("suite-renamed", ["eval", "--suite", "{suites}/renamed.yaml", *M], 3, ["field 'name': must equal the file name 'renamed'"]),
    ("suite-folder", ["eval", "--suite", "{tmp}", *M], 3, ["unknown suite"]),
    ("suite-with-k", ["eval", "--suite", "toy", *M, "-k", "2"], 2, ["--suite sets K per benchmark: drop -k"]),
    # model and artifact references
    ("model-is-a-data-file", ["passrate", "--data", "{data}", "--model", "{data}"], 3,
     ["model '{data}' is neither an artifact, a model directory, nor an HF id"]),
    ("model-is-a-folder", ["passrate", "--data", "{data}", "--model", "{tmp}"], 3, ["is neither an artifact, a model directory"]),
    ("artifact-path-outside", ["artifacts", "show", "../../etc"], 3, ["no complete artifact '../../etc'"]),
    ("artifact-unknown", ["artifacts", "lineage", "nope"], 3, ["no complete artifact 'nope'"]),
    ("verify-unknown", ["artifacts", "verify", "nope"], 3, ["no complete artifact 'nope'"]),
    ("regrade-a-folder", ["eval", "--regrade", "{tmp}"], 3, ["no complete artifact"]),
    ("merge-unknown", ["passrate", "merge", "nope"], 3, ["no complete artifact 'nope'"]),
    ("ls-stage-climbs", ["artifacts", "ls", "--stage", "eval/../.."], 2, ["is not a stage name"]),
    # reports
    ("plot-a-folder", ["report", "plot", "{tmp}", "--out", "{tmp}/figures"], 3, ["not an artifact directory this can plot"]),
    ("html-a-data-file", ["report", "html", "{data}", "--out", "{tmp}/x.html"], 3, ["no complete artifact"]),
    ("compare-empty-label", ["report", "compare", "={tmp}"], 2, ["expected LABEL=EVAL_ARTIFACT"]),
    ("compare-not-an-eval", ["report", "compare", "a={tmp}"], 3, ["no complete artifact"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_careless_input_is_named_with_its_code(tmp_path, files, argv, code, fragments):
    root = tmp_path / "artifacts"
    args = [a.format(**files) for a in argv]
    env = {"ARES_MANIFESTS": str(files["manifests"])}
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), *args], env=env)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    text = " ".join(result.output.split())
    assert result.exit_code == code, text
    for fragment in fragments:
        assert fragment.format(**files) in text, text
    assert not list(root.glob("*/*.partial")) if root.exists() else True


PIPELINES = [
    ("unknown-top-key", "stage: {a: {run: toy init}}\nstages: {a: {run: toy init}}\n", 3,
     ["field 'stage': unknown key (allowed: name, description"]),
    ("unknown-stage-key", "stages: {a: {run: passrate, confg: {k: 2}}}\n", 3,
     ["field 'stages.a.confg': unknown key (allowed: run, argv"]),
    ("config-a-list", "stages: {a: {run: passrate, config: [k]}}\n", 3,
     ["field 'stages.a.config': must be a mapping of config keys"]),
    ("argv-on-passrate", "stages: {a: {run: passrate, argv: [x]}}\n", 3,
     ["field 'stages.a.argv': this verb takes no positional words"]),
    ("report-a-list", "report: [a]\nstages: {a: {run: toy init}}\n", 3,
     ["field 'report': must be a mapping {compare: {label: stage}}"]),
    ("report-unknown-stage", "report: {compare: {x: zz}}\nstages: {a: {run: toy init}}\n", 3,
     ["field 'report.compare.x': 'zz' is not a stage"]),
    ("stage-name-too-long", "stages: {" + "a" * 101 + ": {run: toy init}}\n", 2,
     ["is not an identifier (a letter or '_', then up to 99 letters"]),
    ("stage-not-a-mapping", "stages: {a: 5}\n", 3, ["field 'stages.a.run': 'run' must be one of toy init"]),
    ("reference-to-itself", "stages: {a: {run: passrate, args: {model: '@a'}}}\n", 3,
     ["field 'stages.a.args.model': '@a' is not an earlier stage"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "code", "fragments"), [c[1:] for c in PIPELINES], ids=[c[0] for c in PIPELINES]
)
def test_a_careless_pipeline_file_is_named_before_anything_is_written(tmp_path, text, code, fragments):
    import subprocess
    import sys

    path = tmp_path / "shared.yaml"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "ares_cli.pipeline", "render", str(path), "--state", str(tmp_path / "state")],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    said = " ".join(proc.stderr.split())
    assert proc.returncode == code and "Traceback" not in said, said
    assert str(path) in said and all(f in said for f in fragments), said
    assert not (tmp_path / "state").exists()
