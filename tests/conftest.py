"""Shared fixtures: the tiny random causal LMs (one builder, :mod:`fixtures_tiny_model`), a small toy-world
store built once per test run, the offline Qwen2.5 tokenizer's cache, and a CLI runner.

Fixtures that build something several test files read are session-scoped; under pytest-xdist the
costliest ones are built once across the workers (:func:`built_once`) and every test that changes its
copy gets one of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tiny test models run fastest on one thread; subprocesses (CLI runs, distributed tests) inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_SCOPES = ("module", "class", "package")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (``make test``) a test is its own unit of work, so the two workers stay
    busy to the end, except that the tests of one file that share a module- or class-scoped fixture form
    one unit (``xdist_group``: the fixture is built once, on one worker). Runs before xdist names the groups."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(d.scope in SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def built_once(tmp_path_factory, worker_id: str, name: str, build: Callable[[Path], None]) -> Path:
    """``build(directory)`` run once per test run, whichever pytest-xdist worker asks first (the others
    wait on a file lock, then read what it built); without xdist, once per session. The directory is
    published only when ``build`` returns, so a failed build is retried, never half read."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # the run's directory, above every worker's
    out = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not out.is_dir():
            partial = shared / f"{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            build(partial)
            partial.rename(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide Llama with the toy tokenizer and chat template (random weights, seed 0)."""
    from fixtures_tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"), tokenizer="toy")


@pytest.fixture(scope="session")
def tiny_chars_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide tied Llama with the character-level test tokenizer (random weights, seed 0),
    for the SFT tests' curate-style records (:func:`fixtures_tiny_model.write_sft_jsonl`). Read-only."""
    from fixtures_tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-chars-model") / "base")


TOY_PASSRATE = ["passrate", "--data", "toy-train", "--limit", "4", "-k", "2", "--set", "chunk_problems=1",
                "--max-new-tokens", "96"]  # fmt: skip
TOY_EVAL = ["eval", "--bench", "toy-val", "--limit", "2", "-k", "1", "--max-new-tokens", "96"]


def _build_toy_store(directory: Path) -> None:
    """The toy chain's first stages on the embedded toy world, tiny settings: ``toy init`` (the shipped
    base), a passrate and an eval of it, a curate of the passrate; ``ids.json`` maps stage to artifact."""
    from typer.testing import CliRunner

    from ares_cli.main import app

    root, ids = directory / "artifacts", {}
    for stage, argv in (
        ("toy-init", ["toy", "init"]),
        ("passrate", [*TOY_PASSRATE, "--model", "{toy-init}"]),
        ("eval", [*TOY_EVAL, "--model", "{toy-init}"]),
        ("curate", ["curate", "--passrate", "{passrate}", "--per-bracket", "2"]),
    ):
        result = CliRunner().invoke(
            app, ["--artifacts-root", str(root), "--json", *[a.format(**ids) for a in argv]]
        )
        assert result.exit_code == 0, result.output
        ids[stage] = json.loads(result.stdout.strip().splitlines()[-1])["artifact_id"]
    (directory / "ids.json").write_text(json.dumps(ids))


@pytest.fixture(scope="session")
def toy_store(tmp_path_factory, worker_id) -> tuple[Path, dict[str, str]]:
    """(artifacts root, artifact id by stage) of the toy chain's store (:func:`_build_toy_store`), built
    once per test run. Read-only: a test that changes it copies it first (``shutil.copytree``)."""
    built = built_once(tmp_path_factory, worker_id, "toy-store", _build_toy_store)
    return built / "artifacts", json.loads((built / "ids.json").read_text())


@pytest.fixture(scope="session")
def qwen_tokenizer_json() -> Path:
    """The offline Qwen2.5 tokenizer's converted ``tokenizer.json`` (``$ARES_CACHE_DIR``), converted by one
    worker while the others wait instead of by each at once on a cold cache."""
    from filelock import FileLock

    from ares_cli.rehearsal.qwen_tokenizer import cache_root, tokenizer_json

    cache_root().mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_root() / "qwen2.5-tokenizer.lock")):
        return tokenizer_json()


@pytest.fixture(scope="session")
def tiny_vl_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2.5-VL (real transformers class) with tokenizer and processor (seed 0)."""
    from ares_cli.toy.tiny_vl import save_tiny_vl

    out = tmp_path_factory.mktemp("tiny-vl")
    save_tiny_vl(out, seed=0)
    return out


@pytest.fixture(scope="session")
def vl_images(tmp_path_factory) -> list[Path]:
    """Four small PNGs of different sizes and colours (28x28 to 56x56)."""
    from PIL import Image, ImageDraw

    out = tmp_path_factory.mktemp("vl-images")
    paths = []
    for i, (size, color) in enumerate([((28, 28), (255, 0, 0)), ((56, 28), (0, 200, 0)),
                                       ((42, 56), (0, 0, 255)), ((56, 56), (250, 250, 0))]):  # fmt: skip
        img = Image.new("RGB", size, color)
        ImageDraw.Draw(img).rectangle([2, 2, 10 + i, 12], fill=(i * 60, 255 - i * 60, 128))
        paths.append(out / f"img{i}.png")
        img.save(paths[-1])
    return paths


def run_ares(
    *args: str, root: Path, check: bool = True, timeout: float = 600, process: bool = True
) -> subprocess.CompletedProcess:
    """Run ``ares`` with stdout and stderr kept apart: in a fresh interpreter by default; ``process=False``
    runs it in this process (the same app and error mapping as the console entry point, see
    :mod:`cli_runner`), for tests that only need the exit code, the streams and the artifact."""
    if process:
        env = os.environ | {"ARES_ARTIFACTS": str(root), "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run(
            [sys.executable, "-c", "from ares_cli.main import main; main()", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=str(REPO),
        )
    else:
        from cli_runner import invoke_in_process

        proc = invoke_in_process(list(args), env={"ARES_ARTIFACTS": str(root)}, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"ares {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc
