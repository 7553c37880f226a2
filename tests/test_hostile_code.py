"""No code from data: manifests, stored artifacts and pipeline files cannot make `ares` run code.

A dataset manifest, a stored eval artifact, a suite and a pipeline file are data that people share and
download. They may name graders only by registered name (built-ins, installed ``ares.graders`` entry
points); a ``module:function`` grader needs the user's ``--trust-grader-code`` on the command line, and
even then the path is checked against the object it reaches. Pipeline files cannot reach the shell or
Make (``test_hostile_pipelines.py``); paths read from a stored manifest stay inside their artifact. The
scan of the package for the constructs that run code from bytes is in ``test_code_from_bytes.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.errors import UsageError
from ares_cli.grading.registry import load_target, resolve_grader
from ares_cli.main import app


def custom_grade(gold: str, response: str) -> bool:
    """A custom grader named by path (tests/ is on sys.path under pytest; workers inherit it)."""
    return gold in response


def _invoke(root: Path, *argv: str, env: dict | None = None):
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), *argv], env=env)
    text = " ".join(result.output.split())
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, text


@pytest.fixture()
def world(tmp_path, monkeypatch) -> dict[str, Path]:
    """Problems whose gold is a file path, samples whose answers are paths, a victim file, and a module
    that leaves a marker when it is imported (so a test sees whether anything imported it)."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "source": "toy", "problem": "1+1?", "answer": str(victim)}) + "\n"
            for i in (1, 2)
        )
    )
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        "".join(
            json.dumps({"problem_id": f"p{i}", "sample_idx": 0, "response": f"\\boxed{{{tmp_path}/moved}}"})
            + "\n"
            for i in (1, 2)
        )
    )
    modules = tmp_path / "modules"
    modules.mkdir()
    marker = tmp_path / "imported"
    (modules / "sentinel_grader.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef grade(gold, response):\n    return True\n"
    )
    monkeypatch.syspath_prepend(str(modules))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    return {"tmp": tmp_path, "victim": victim, "problems": problems, "samples": samples, "marker": marker,
            "manifests": manifests}  # fmt: skip


def _manifest(world: dict[str, Path], grader: object) -> Path:
    path = world["manifests"] / "shared.yaml"
    path.write_text(
        "name: shared\ndescription: a downloaded manifest\nlicence: MIT\n"
        f"source: {{local: {{path: {world['problems']}}}}}\ngrader: {json.dumps(grader)}\n"
    )
    return path


# -- dataset manifests name graders only by registered name ---------------------------------------------

MANIFEST_GRADERS = [
    "rich:os.rename",  # an allowed third-party module, an attribute path into os
    "rich:os.execlp",
    "ares_cli.grading.graders:os.system",  # the package's own module, walking into os
    "ares_cli.grading:graders.math_verify_grade",  # a real grader reached through a parent package
    "ares_cli.grading.graders:math_verify_grade",  # a real grader by path: still a path, not a name
    "sentinel_grader:grade",  # importing it would run its code
    "os.system",
    "__import__",
    " math_verify",
    5,
    ["math_verify"],
]


@pytest.mark.parametrize("grader", MANIFEST_GRADERS, ids=[repr(g) for g in MANIFEST_GRADERS])
def test_no_manifest_grader_reaches_a_callable_outside_the_registry(world, grader):
    path = _manifest(world, grader)
    env = {"ARES_MANIFESTS": str(world["manifests"])}
    code, text = _invoke(
        world["tmp"] / "artifacts",
        "eval",
        "--data",
        "shared",
        "--from-samples",
        str(world["samples"]),
        env=env,
    )
    assert code == 3, text
    assert f"{path}, field 'grader'" in text and "registered grader" in text
    assert not world["marker"].exists(), "the manifest's module was imported"
    assert world["victim"].read_text() == "keep me\n" and not (world["tmp"] / "moved").exists()


def test_a_manifest_may_name_registered_graders():
    from ares_cli.grading.registry import is_registered

    assert all(is_registered(name) for name in ("math", "math_verify", "boxed_int", "choice"))
    assert not any(is_registered(name) for name in ("rich:os.rename", "math_verify:x", "", "os.system"))


# -- module paths: only with the user's opt-in, and checked as objects ----------------------------------

UNTRUSTED = [
    ("passrate", ["passrate", "--data", "{problems}", "--model", "m", "--grader", "sentinel_grader:grade"]),
    ("eval", ["eval", "--data", "{problems}", "--from-samples", "{samples}", "--grader", "sentinel_grader:grade"]),
    ("rl", ["rl", "--data", "{problems}", "--model", "m", "--set", "grading.grader=sentinel_grader:grade"]),
    ("curate", ["curate", "--passrates", "{problems}", "--grader", "sentinel_grader:grade"]),
    ("data-check", ["data", "check", "{problems}", "--grader", "sentinel_grader:grade"]),
]  # fmt: skip


@pytest.mark.parametrize("argv", [c[1] for c in UNTRUSTED], ids=[c[0] for c in UNTRUSTED])
def test_a_module_path_grader_needs_the_opt_in_and_is_not_imported_without_it(world, argv):
    code, text = _invoke(world["tmp"] / "artifacts", *[a.format(**world) for a in argv])
    assert code == 2, text
    assert "'sentinel_grader:grade' is a module path" in text and "--trust-grader-code" in text
    assert not world["marker"].exists()


FILES_GRANTING_TRUST = [
    ("config-yaml", ["eval", "--data", "{problems}", "--from-samples", "{samples}", "--config", "{file}"],
     "trust_grader_code: true\ngrader: sentinel_grader:grade\n", "config key 'trust_grader_code' is set in"),
    ("rl-config-yaml", ["rl", "--data", "{problems}", "--model", "m", "--config", "{file}"],
     "grading: {trust_grader_code: true, grader: 'sentinel_grader:grade'}\n",
     "config key 'grading.trust_grader_code' is set in"),
    ("suite", ["eval", "--suite", "{file}", "--model", "m"],
     "name: shared\ndescription: d\neval: {trust_grader_code: true}\nbenches: [{bench: toy-test, label: t, k: 1, metrics: [avg]}]\n",
     "config key 'trust_grader_code' is set in {file}"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "content", "fragment"),
    [c[1:] for c in FILES_GRANTING_TRUST],
    ids=[c[0] for c in FILES_GRANTING_TRUST],
)
def test_no_file_can_grant_the_opt_in(world, argv, content, fragment):
    file = world["tmp"] / "shared.yaml"
    file.write_text(content)
    code, text = _invoke(world["tmp"] / "artifacts", *[a.format(**world, file=file) for a in argv])
    assert code == 2, text
    assert fragment.format(file=file) in text and "only on the command line" in text
    assert not world["marker"].exists()


@pytest.mark.valid_input
def test_with_the_opt_in_a_custom_grader_grades(world):
    args = ["eval", "--data", str(world["problems"]), "--from-samples", str(world["samples"]),
            "--grader", f"{__name__}:custom_grade", "--trust-grader-code"]  # fmt: skip
    code, text = _invoke(world["tmp"] / "artifacts", *args)
    assert code == 0, text


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("rich:os.execlp", "reaches os.execlp, which is not defined in 'rich'"),
        ("rich:os.rename", "not a Python function"),
        ("ares_cli.grading:graders.math_verify_grade", "not defined in 'ares_cli.grading'"),
        ("ares_cli.grading.graders:math_verify_version", "cannot be called as fn(gold, response)"),
        ("ares_cli.grading.registry:GraderSpec", "not a Python function"),
        ("ares_cli:__version__", "not callable"),
        ("builtins:print", "standard-library module"),
        ("os:system", "standard-library module"),
        ("rich :print", "not of the form 'module:function'"),
        ("rich:os.path.join", "not defined in 'rich'"),
    ],
)
def test_a_trusted_path_is_checked_as_the_object_it_reaches(world, target, fragment):
    """Even with the opt-in, the path must name a function where it is defined: an attribute path cannot
    walk from an allowed module into ``os`` (the check is on the object, in the parent and the workers)."""
    with pytest.raises(UsageError) as err:
        resolve_grader(target, trust_code=True)
    assert fragment in str(err.value)
    with pytest.raises(UsageError):
        load_target(target)  # what a grading worker calls
    argv = ["eval", "--data", str(world["problems"]), "--from-samples", str(world["samples"]),
            "--grader", target, "--trust-grader-code"]  # fmt: skip
    code, text = _invoke(world["tmp"] / "artifacts", *argv)
    assert code == 2 and fragment in text, text
    assert world["victim"].read_text() == "keep me\n" and not (world["tmp"] / "moved").exists()
    assert not (world["tmp"] / "artifacts").exists()


def test_an_installed_entry_point_is_a_registered_name(monkeypatch):
    from importlib.metadata import EntryPoint

    from ares_cli.grading import registry

    eps = [EntryPoint("shared_grader", f"{__name__}:custom_grade", "ares.graders")]
    monkeypatch.setattr(
        "importlib.metadata.entry_points", lambda group: eps if group == "ares.graders" else []
    )
    assert registry.is_registered("shared_grader")
    spec = resolve_grader("shared_grader")
    assert spec.target == f"{__name__}:custom_grade" and load_target(spec.target) is custom_grade


# -- a stored eval artifact is data: its names stay inside it, its graders are names ----------------------


@pytest.fixture()
def stored_eval(world) -> tuple[Path, Path]:
    root = world["tmp"] / "artifacts"
    code, text = _invoke(root, "--json", "eval", "--data", str(world["problems"]), "--from-samples",
                         str(world["samples"]))  # fmt: skip
    assert code == 0, text
    artifact = next((root / "eval").glob("eval-*"))
    return root, artifact


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"benches": ["../../../../victim:1"]}, "config.benches", "is not a plain file name"),
        ({"benches": ["..:1"]}, "config.benches", "is not a plain file name"),
        ({"benches": "problems"}, "config.benches", "must be a list of benchmark names"),
        ({"graders": {"problems": "rich:os.rename"}}, "config.graders.problems", "not a registered grader"),
        ({"graders": {"problems": "sentinel_grader:grade"}}, "config.graders.problems", "never names code"),
    ],
    ids=["dotdot-path", "dotdot", "not-a-list", "stored-module-path", "stored-sentinel"],
)
def test_regrade_reads_a_stored_manifest_as_data(world, stored_eval, change, field, fragment):
    root, artifact = stored_eval
    manifest_file = artifact / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["config"] |= change
    manifest_file.write_text(json.dumps(manifest))
    before = {
        p: p.read_bytes() for p in world["tmp"].rglob("*") if p.is_file() and "artifacts" not in p.parts
    }
    code, text = _invoke(root, "eval", "--regrade", str(artifact))
    assert code == 3, text
    assert f"{manifest_file}, field '{field}'" in text and fragment in text
    assert not world["marker"].exists()
    after = {p: p.read_bytes() for p in world["tmp"].rglob("*") if p.is_file() and "artifacts" not in p.parts}
    assert after == before  # nothing outside the artifacts root read-and-rewritten
    assert not list(root.glob("eval/*.partial"))


def test_regrade_with_an_explicit_grader_replaces_a_stored_one(world, stored_eval):
    root, artifact = stored_eval
    manifest_file = artifact / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["config"]["graders"] = {"problems": "rich:os.rename"}
    manifest_file.write_text(json.dumps(manifest))
    code, text = _invoke(root, "eval", "--regrade", str(artifact), "--grader", "math")
    assert code == 0, text


# -- every other manifest string that becomes a path stays in its root ----------------------------------


def test_a_manifest_artifact_id_that_is_a_path_is_corrupt(world, stored_eval):
    """An artifact id names a directory: a tampered id with separators is a corrupt manifest (exit 4),
    so nothing globs or joins it into a path (``passrate merge`` re-resolved shards by it)."""
    root, artifact = stored_eval
    manifest_file = artifact / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["artifact_id"] = "eval-../../../victim"
    manifest_file.write_text(json.dumps(manifest))
    for argv in (["artifacts", "show", str(artifact)], ["passrate", "merge", str(artifact)]):
        code, text = _invoke(root, *argv)
        assert code == 4, text
        assert "is not of the form <stage>-<12 hex digits>" in text


def test_lineage_follows_input_ids_inside_the_store_only(world, stored_eval):
    root, artifact = stored_eval
    outside = world["tmp"] / "elsewhere" / "eval-000000000000"
    outside.mkdir(parents=True)
    (outside / "manifest.json").write_text(json.dumps({"artifact_id": "x"}))
    manifest_file = artifact / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["inputs"] = [
        {"role": "a", "path": str(outside), "sha256": "0" * 64, "artifact_id": "../elsewhere"},
        {"role": "b", "path": str(outside.parent), "sha256": "0" * 64, "artifact_id": "eval-111111111111"},
    ]
    manifest_file.write_text(json.dumps(manifest))
    code, text = _invoke(root, "--json", "artifacts", "lineage", str(artifact))
    assert code == 0, text
    tree = json.loads(text)
    first, second = tree["inputs"]
    assert "is not of the form" in first["corrupt"] and second["missing"] is True


@pytest.mark.parametrize("stage", ["../x", "..", "eval/..", "/etc", ""])
def test_artifacts_ls_stays_inside_the_root(tmp_path, stage):
    (tmp_path / "x" / "passrate-000000000000").mkdir(parents=True)
    code, text = _invoke(tmp_path / "artifacts", "artifacts", "ls", "--stage", stage)
    assert code == 2, text
    assert "is not a stage name" in text and "passrate-000000000000" not in text
