"""The vLLM weight sync's extra memory under ZeRO-3, measured: 2 CPU ranks (gloo), DeepSpeed ZeRO-3 with
every parameter partitioned (persistence threshold 0), ``rollout.backend=vllm`` against the strict vLLM
stand-in (tests/vllm_standin.py, built from the real signatures) and its sleep mode.

During each ``load_weights`` call the stand-in counts the bytes of the policy's parameters that are whole
on the rank at that moment (a partitioned ZeRO-3 parameter holds an empty tensor until gathered): the
sync's extra memory is the peak of that count less its value before the sync. The policy itself, the
largest parameter and each rank's engine arguments are recorded beside it, one JSON per rank.

    .venv/bin/python benchmarks/bench_sync_memory.py [--hidden 128 --layers 4]   # prints one JSON line
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETS = ["algo=grpo", "steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
        "rollout.backend=vllm", "rollout.sleep_mode=on", "optim.mini_batch_size=2", "optim.micro_batch_size=2",
        "grading.workers=1", "save_every=0"]  # fmt: skip
ZERO3_ALL_PARTITIONED = {
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
    "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "stage3_gather_16bit_weights_on_model_save": True},
}  # fmt: skip


def whole_bytes(model) -> int:
    """Bytes of the parameters held whole on this rank now (a partitioned one holds an empty tensor)."""
    return sum(p.data.numel() * p.data.element_size() for p in model.parameters())


def full_sizes(model) -> list[int]:
    """Each parameter's full size in bytes (ZeRO-3's ``ds_numel`` where partitioned)."""
    return [getattr(p, "ds_numel", p.numel()) * p.element_size() for p in model.parameters()]


def rank_main(model_dir: str, out: str, *sets: str) -> None:
    """One rank: train with the stand-in engine, measure every sync, write ``out/rank<R>.json``."""
    sys.path.insert(0, str(REPO / "tests"))
    import vllm_standin

    from ares_cli.data.loader import load_problems
    from ares_cli.training.distributed import leave_process
    from ares_cli.training.rl import engines
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    vllm_standin.install()
    syncs: list[dict] = []
    original_sync = engines.sync_backend

    def measured_sync(backend, model, gather):
        record = {"before": whole_bytes(model), "peak": 0, "per_call": set()}
        backend.llm.model.on_load = lambda weights: (
            record.__setitem__("peak", max(record["peak"], whole_bytes(model))),
            record["per_call"].add(len(weights)),
        )
        original_sync(backend, model, gather)
        syncs.append({**record, "per_call": sorted(record["per_call"]), "sizes": full_sizes(model)})

    engines.sync_backend = measured_sync
    cfg = resolve_rl_config(sets=list(sets))
    result = train_rl(cfg, model_path=model_dir, problems=load_problems("toy-train", limit=8).records,
                      val_problems=None, out_dir=out, log=lambda m: None)  # fmt: skip
    llm = vllm_standin.StrictLLM.instances[-1]
    last = {name: tensor for name, tensor in llm.model.loaded[-len(syncs[-1]["sizes"]) :]}
    rank = int(os.environ["RANK"])
    Path(out, f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "env": llm.env, "engine_kwargs": {k: v for k, v in llm.kw.items() if k != "model"},
        "engines_built": len(vllm_standin.StrictLLM.instances), "events": llm.events, "syncs": syncs,
        "zero_stage": result.stats.get("deepspeed_zero_stage"),
        "last_sync": {n: t.double().sum().item() for n, t in last.items()},
    }))  # fmt: skip
    leave_process(0)


def launch(model_dir: Path, out: Path, world: int, sets: list[str], tmp: Path) -> list[dict]:
    """``world`` ranks of :func:`rank_main` (gloo on CPU); their JSON records, rank order."""
    ds = tmp / "zero3_all_partitioned.json"
    ds.write_text(json.dumps(ZERO3_ALL_PARTITIONED))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}  # fmt: skip
    args = [sys.executable, __file__, "rank", str(model_dir), str(out), *SETS, *sets, f"optim.deepspeed={ds}"]
    procs = [subprocess.Popen(args, cwd=REPO, env=env | {"RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]  # fmt: skip
    logs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a rank failed:\n" + "\n---\n".join(log[-3000:] for log in logs))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def summary(records: list[dict]) -> dict:
    """Per-rank peak extra bytes of a sync beside the largest parameter and the whole policy."""
    syncs = [s for r in records for s in r["syncs"]]
    sizes = syncs[0]["sizes"]
    return {"ranks": len(records), "syncs": len(syncs), "parameters": len(sizes),
            "largest_parameter_bytes": max(sizes), "policy_bytes": sum(sizes),
            "peak_extra_bytes": max(s["peak"] - s["before"] for s in syncs),
            "held_before_sync_bytes": max(s["before"] for s in syncs)}  # fmt: skip


def main(argv: list[str]) -> None:
    import argparse
    import contextlib

    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args(argv)
    # DeepSpeed logs to stdout when it is imported: stdout carries the JSON alone
    with contextlib.redirect_stdout(sys.stderr):
        records = measure(a.hidden, a.layers)
    print(json.dumps({"bench": "sync_memory", "hidden": a.hidden, "layers": a.layers, **summary(records)}))


def measure(hidden: int, layers: int) -> list[dict]:
    """Build the toy-shaped model (``hidden`` wide, ``layers`` deep) and run the 2-rank sync on it."""
    import tempfile

    from ares_cli.toy.model import ToyModelShape, build_model
    from ares_cli.toy.tokenizer import build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokenizer = build_tokenizer()
        shape = ToyModelShape(hidden_size=hidden, num_layers=layers, num_heads=4, intermediate_size=4 * hidden,
                              max_positions=256)  # fmt: skip
        build_model(tokenizer, shape, seed=0).save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        return launch(tmp / "model", tmp / "out", 2, [], tmp)


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        rank_main(*sys.argv[2:])
    else:
        main(sys.argv[1:])
