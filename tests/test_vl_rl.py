"""RL with images on a tiny Qwen2.5-VL: AEPO and PAEC steps, re-scoring sees the generation's images,
and DeepSpeed ZeRO-2 on two CPU processes matches one process."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import child_processes
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
GRADER = "test_rl_graders:parity_grade"
TINY = ["steps=1", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "optim.mini_batch_size=2", "optim.micro_batch_size=3", "optim.lr=1e-3", "grading.workers=1",
        f"grading.grader={GRADER}", "grading.trust_grader_code=true", "val.every=0", "save_every=0", "rollout.min_pixels=784",
        "rollout.max_pixels=3136"]  # fmt: skip


def vl_problems(images, n=4) -> list[dict]:
    return [{"id": f"v{i}", "source": "vis", "problem": f"how many dots {i}?", "answer": str(i),
             "images": [str(images[i % len(images)])] + ([str(images[(i + 1) % len(images)])] if i % 2 else [])}
            for i in range(n)]  # fmt: skip


def vl_rl_batch(model_dir, images):
    """Three image prompts of the tiny Qwen2.5-VL, two random responses each (3 and 7 tokens), collated:
    (tokenizer, processor, groups, batch)."""
    from ares_cli.models import load_processor, load_tokenizer
    from ares_cli.training.rl.batch import collate
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.rollout import Group, prompt_ids, prompt_request

    tok = load_tokenizer(model_dir)
    proc = load_processor(model_dir, min_pixels=784, max_pixels=3136)
    r = resolve_rl_config(sets=TINY).rollout
    gen = torch.Generator().manual_seed(0)
    groups = []
    for i, p in enumerate(vl_problems(images, 3)):
        req = prompt_request(tok, p, r, processor=proc)
        responses = [torch.randint(5, 80, (int(n),), generator=gen).tolist() for n in (3, 7)]
        groups.append(Group(i, p["id"], prompt_ids(tok, req, proc), responses, ["stop"] * 2, ["correct"] * 2,
                            images=list(req.images)))  # fmt: skip
    return tok, proc, groups, collate(groups, pad_id=tok.pad_token_id, processor=proc)


def _train(sets, model_dir, problems, out):
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    return train_rl(resolve_rl_config(sets=[*TINY, *sets]), model_path=model_dir, problems=problems,
                    val_problems=None, out_dir=out, log=lambda _m: None)  # fmt: skip


@pytest.mark.parametrize("algo", ["aepo", "paec"])
def test_one_rl_step_with_images(algo, tiny_vl_dir, vl_images, tmp_path):
    from safetensors.torch import load_file

    result = _train([f"algo={algo}"], tiny_vl_dir, vl_problems(vl_images), tmp_path)
    assert result.complete and result.stats["steps"] == 1
    (row,) = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert row["response_len"] > 0 and 0.0 <= row["accuracy"] <= 1.0 and "loss" in row
    if algo == "aepo":
        assert "aepo/threshold" in row
    else:
        assert row["paec/h0"] > 0
    before, after = (
        load_file(str(tiny_vl_dir / "model.safetensors")),
        load_file(str(tmp_path / "model/model.safetensors")),
    )
    lm = [k for k in before if "visual" not in k]  # checkpoint names: model.layers..., visual.blocks...
    assert any(not torch.equal(before[k], after[k]) for k in lm)
    from ares_cli.models import load_model, load_processor

    assert type(load_model(tmp_path / "model")).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert load_processor(tmp_path / "model") is not None  # the next stage can encode images


def test_rescoring_sees_the_same_images_as_each_row_alone(tiny_vl_dir, vl_images, tmp_path):
    """Batched old-policy log-probs (left/right padding, rows with different images) equal each row scored
    alone through the model's own multimodal path (its own rope index); a wrong image changes them."""
    from ares_cli.models import load_model
    from ares_cli.models.vision import mm_token_type_ids
    from ares_cli.training.rl.batch import collate, rollout_pass
    from ares_cli.training.rl.rollout import Group

    model = load_model(tiny_vl_dir).eval()
    tok, proc, groups, batch = vl_rl_batch(tiny_vl_dir, vl_images)
    rollout_pass(model, batch, stats=("logprob",), prefix="old_", micro=4, temperature=1.0)
    from ares_cli.models.vision import encode_images

    row = 0
    for g in groups:
        vision = encode_images(proc, g.images)
        for resp in g.response_ids:
            ids = torch.tensor([g.prompt_ids + resp])
            with torch.no_grad():
                model.model.rope_deltas = None
                logits = model(input_ids=ids, pixel_values=vision.pixel_values, image_grid_thw=vision.image_grid_thw,
                               mm_token_type_ids=mm_token_type_ids(model, ids)).logits[0]  # fmt: skip
            lp = torch.log_softmax(logits.float(), -1)[len(g.prompt_ids) - 1 : -1].gather(
                -1, torch.tensor(resp)[:, None]
            )
            torch.testing.assert_close(batch.tok.old_logprob[row, : len(resp)], lp[:, 0], atol=1e-4, rtol=0)
            row += 1
    from PIL import Image, ImageOps

    def inverted(path):  # same size (same token count), other pixels
        out = tmp_path / f"inv-{Path(path).name}"
        ImageOps.invert(Image.open(path).convert("RGB")).save(out)
        return str(out)

    swapped = [Group(**{**g.to_json(), "images": [inverted(p) for p in g.images]}) for g in groups]
    other = collate(swapped, pad_id=tok.pad_token_id, processor=proc)
    rollout_pass(model, other, stats=("logprob",), prefix="old_", micro=4, temperature=1.0)
    assert not torch.allclose(other.tok.old_logprob, batch.tok.old_logprob, atol=1e-4)


SCRIPT = """
import json, sys
from ares_cli.training.rl.config import resolve_rl_config
from ares_cli.training.distributed import leave_process
from ares_cli.training.rl.trainer import train_rl
if __name__ == "__main__":
    model, out, problems, *sets = sys.argv[1:]
    train_rl(resolve_rl_config(sets=sets), model_path=model, problems=json.load(open(problems)),
             val_problems=None, out_dir=out, log=lambda m: None)
    leave_process(0)
"""


def _run(tmp_path, model, out, problems, sets, world):
    script = tmp_path / "run_vl_rl.py"
    script.write_text(SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}  # fmt: skip
    procs = [child_processes.start([sys.executable, str(script), str(model), str(out), str(problems), *sets], cwd=REPO, merge_stderr=True,
                                   env=env | {"RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(world)]  # fmt: skip
    outputs = [out for out, _ in child_processes.wait_all(procs, timeout=480)]
    assert all(p.returncode == 0 for p in procs), outputs[0][-3000:] + outputs[-1][-3000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("deepspeed") is None, reason="needs deepspeed")
def test_vl_zero2_two_ranks_match_one_process(tiny_vl_dir, vl_images, tmp_path):
    from safetensors.torch import load_file

    problems = tmp_path / "problems.json"
    problems.write_text(json.dumps(vl_problems(vl_images)))
    sets = [*TINY, "algo=grpo", "optim.micro_batch_size=2"]
    single = _run(tmp_path, tiny_vl_dir, tmp_path / "one", problems, sets, 1)
    double = _run(tmp_path, tiny_vl_dir, tmp_path / "two", problems,
                  [*sets, f"optim.deepspeed={REPO / 'pipelines/deepspeed/zero2.json'}"], 2)  # fmt: skip
    for a, b in zip(single, double, strict=True):
        for key in ("reward", "accuracy", "response_len", "cursor"):
            assert a[key] == b[key], key
        for key in ("loss", "pg_loss", "entropy", "grad_norm"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
    wa = load_file(str(tmp_path / "one/model/model.safetensors"))
    wb = load_file(str(tmp_path / "two/model/model.safetensors"))
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], atol=1e-4, rtol=0)
