"""A DeepSpeed engine starts without compiling anything at run time.

On the CPU accelerator DeepSpeed's comm backend JIT-compiles a shared-memory all-reduce (an op only its
inference tensor parallelism calls) every time a process group forms. The compile needs a C++ toolchain at
run time, costs about a minute on a fresh machine, and waits forever on the build lock a killed build left
behind. ares never calls that op, so its engines start without it."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    __import__("importlib").util.find_spec("deepspeed") is None, reason="needs deepspeed"
)

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from ares_cli.training.distributed import deepspeed_engine

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": 1,
              "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": int(sys.argv[1])},
              "steps_per_print": 10**9}
    engine = deepspeed_engine(model, optimizer, config)
    loss = engine(torch.ones(1, 4)).sum()
    engine.backward(loss)
    engine.step()
    print("stepped", float(loss))
    """
)


@pytest.mark.parametrize("stage", [2, 3])
def test_engine_starts_past_a_stale_extension_build_lock_and_builds_nothing(tmp_path, stage):
    """A build directory holding only a killed build's lock (no library): DeepSpeed's loader would wait on
    it forever; the engine must start, step and leave the directory as it was."""
    extensions = tmp_path / "torch_extensions"
    (extensions / "deepspeed_shm_comm").mkdir(parents=True)
    (extensions / "deepspeed_shm_comm" / "lock").touch()
    script = tmp_path / "start.py"
    script.write_text(SCRIPT)
    env = os.environ | {"PYTHONPATH": str(REPO), "TORCH_EXTENSIONS_DIR": str(extensions), "PYTHONFAULTHANDLER": "1",
                        "PYTHONUNBUFFERED": "1"}  # fmt: skip
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.Popen([sys.executable, str(script), str(stage)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    limit = int(os.environ.get("ARES_TEST_START_TIMEOUT", "240"))
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints where every thread waits
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"the DeepSpeed engine did not start in {limit} s:\n{out[-4000:]}")
    assert proc.returncode == 0 and "stepped" in out, out[-3000:]
    built = sorted(p.name for p in extensions.rglob("*"))
    assert built == ["deepspeed_shm_comm", "lock"], built


def test_the_skipped_op_is_where_deepspeed_builds_it():
    """Tripwire: the comm backend still builds its op through the module-level function ares replaces for
    the duration of ``deepspeed.initialize``; a DeepSpeed that moves it must be re-read, not trusted."""
    import importlib

    ds_torch = importlib.import_module("deepspeed.comm.torch")

    from ares_cli.training.deepspeed_ops import SHM_BUILDER_NAME

    assert callable(ds_torch.build_shm_op)
    assert "build_shm_op()" in inspect.getsource(ds_torch.TorchBackend.__init__)
    assert SHM_BUILDER_NAME in inspect.getsource(ds_torch.build_shm_op)
