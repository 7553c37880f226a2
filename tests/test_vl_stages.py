"""Image problems through passrate and eval on a tiny random Qwen2.5-VL (real CLI, real files)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_ares

pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

ARGS = ("-k", "3", "--max-new-tokens", "10", "--grader", "boxed_int", "--set", "chunk_problems=2",
        "--set", "grade_workers=1", "--set", "min_pixels=784", "--set", "max_pixels=3136")  # fmt: skip


def write_vl_dataset(directory: Path, images: list[Path], n: int = 6) -> Path:
    """``n`` problems with 1-2 images each (copied beside the file, referenced by relative paths)."""
    (directory / "img").mkdir(parents=True, exist_ok=True)
    for p in images:
        shutil.copy(p, directory / "img" / p.name)
    rows = []
    for i in range(n):
        names = [images[i % len(images)].name] + ([images[(i + 1) % len(images)].name] if i % 3 == 0 else [])
        rows.append({"id": f"v{i}", "source": "vis", "problem": f"count the shapes {i}", "answer": str(i % 3),
                     "images": [f"img/{name}" for name in names]})  # fmt: skip
    path = directory / "vl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_vl_passrate_key_follows_image_bytes(tiny_vl_dir, vl_images, tmp_path):
    data = write_vl_dataset(tmp_path / "d", vl_images)
    other = write_vl_dataset(tmp_path / "other", vl_images[:1], n=2)  # never sees img3.png
    root = tmp_path / "art"
    first = run_ares(
        "passrate", "--model", str(tiny_vl_dir), "--data", str(data), *ARGS, process=False, root=root
    )
    out = Path(first.stdout.strip())
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 18 and all(s["n_tokens"] > 0 for s in samples)
    side = run_ares(
        "passrate", "--model", str(tiny_vl_dir), "--data", str(other), *ARGS, process=False, root=root
    )
    again = run_ares(
        "passrate", "--model", str(tiny_vl_dir), "--data", str(data), *ARGS, process=False, root=root
    )
    assert "up to date" in again.stderr and again.stdout.strip() == str(out)
    img = Image.open(tmp_path / "d" / "img" / "img3.png").convert("RGB")
    img.putpixel((0, 0), (1, 2, 3))  # one pixel of one image
    img.save(tmp_path / "d" / "img" / "img3.png")
    changed = run_ares(
        "passrate", "--model", str(tiny_vl_dir), "--data", str(data), *ARGS, process=False, root=root
    )
    assert "up to date" not in changed.stderr and changed.stdout.strip() != str(out)
    side_again = run_ares(
        "passrate", "--model", str(tiny_vl_dir), "--data", str(other), *ARGS, process=False, root=root
    )
    assert "up to date" in side_again.stderr and side_again.stdout.strip() == side.stdout.strip()


@pytest.mark.slow  # 38-54 s; test_passrate_stage's killed run and the VL passrate tests reach its lines
def test_killed_vl_passrate_resumes_to_identical_samples(tiny_vl_dir, vl_images, tmp_path):
    data = write_vl_dataset(tmp_path / "d", vl_images, n=8)
    args = ("passrate", "--model", str(tiny_vl_dir), "--data", str(data), *ARGS)
    straight = run_ares(*args, process=False, root=tmp_path / "a")
    reference = (Path(straight.stdout.strip()) / "samples.jsonl").read_text()
    root = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-c", "from ares_cli.main import main; main()", *args],
                            env=os.environ | {"ARES_ARTIFACTS": str(root)}, cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        files = list(root.glob("passrate/*.partial/samples.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= 6:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = list(root.glob("passrate/*.partial/samples.jsonl"))[0]
    assert 6 <= len(partial.read_text().splitlines()) < 24
    resumed = run_ares(*args, process=False, root=root)
    assert "resuming" in resumed.stderr
    assert (Path(resumed.stdout.strip()) / "samples.jsonl").read_text() == reference


def test_vl_eval_and_curate(tiny_vl_dir, vl_images, tmp_path):
    data = write_vl_dataset(tmp_path / "d", vl_images)
    root = tmp_path / "art"
    result = json.loads(run_ares("--json", "eval", "--model", str(tiny_vl_dir), "--data", str(data), *ARGS,
                                 process=False, root=root).stdout)  # fmt: skip
    assert 0.0 <= result["avg@3"] <= 1.0
    samples = (Path(result["path"]) / "samples").glob("*.jsonl")
    assert sum(len(f.read_text().splitlines()) for f in samples) == 18


def test_text_model_with_image_records_exits_3_before_work(tiny_model_dir, vl_images, tmp_path):
    data = write_vl_dataset(tmp_path / "d", vl_images)
    root = tmp_path / "art"
    for stage in (["passrate"], ["eval"]):
        proc = run_ares(
            *stage,
            "--model",
            str(tiny_model_dir),
            "--data",
            str(data),
            *ARGS,
            process=False,
            root=root,
            check=False,
        )
        assert proc.returncode == 3, proc.stderr
        assert "text-only" in proc.stderr and "row 1" in proc.stderr and "'images'" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not list(root.glob("*/*.partial")) and not list(root.glob("*/*/manifest.json"))


def test_curated_examples_keep_their_images(tiny_vl_dir, vl_images, tmp_path):
    data = write_vl_dataset(tmp_path / "d", vl_images, n=3)
    rates = [{"problem_id": f"v{i}", "source": "vis", "n_correct": 1, "k": 2} for i in range(3)]
    responses = [
        {"problem_id": f"v{i}", "response": f"so \\boxed{{{i % 3}}}", "n_tokens": 9} for i in range(3)
    ]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rates))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses))
    out = json.loads(run_ares("--json", "curate", "--passrates", str(tmp_path / "r.jsonl"), "--responses",
                              str(tmp_path / "c.jsonl"), "--data", str(data), "--grader", "boxed_int",
                              "--per-bracket", "3", process=False, root=tmp_path / "art").stdout)  # fmt: skip
    rows = [json.loads(x) for x in (Path(out["path"]) / "sft.jsonl").read_text().splitlines()]
    assert rows and all(Path(p).is_file() for r in rows for p in r["images"])
    assert {r["problem_id"]: len(r["images"]) for r in rows} == {
        f"v{i}": 2 if i == 0 else 1 for i in range(3)
    }


def test_image_tokens_count_against_the_context(tiny_vl_dir, tmp_path):
    """A 560x560 image is 400 tokens: with 900 of the 1024 positions reserved for the answer the prompt no
    longer fits, though its text with one placeholder would."""
    big = tmp_path / "big.png"
    Image.new("RGB", (560, 560), (9, 99, 199)).save(big)
    data = write_vl_dataset(tmp_path / "d", [big], n=1)
    proc = run_ares("passrate", "--model", str(tiny_vl_dir), "--data", str(data), "-k", "1", "--max-new-tokens",
                    "900", "--set", "max_pixels=1000000", process=False, root=tmp_path / "art", check=False)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "v0" in proc.stderr and "context" in proc.stderr
