"""DeepSpeed engines that start without compiling an op at run time.

On the CPU accelerator, DeepSpeed's comm backend JIT-compiles a shared-memory all-reduce
(``deepspeed_shm_comm``) whenever its process group forms, although only inference tensor parallelism
(``inference_all_reduce``) calls it. The compile needs a C++ toolchain on the training machine, costs about a
minute on a fresh one, and waits forever on the build lock that a killed compile leaves in
``TORCH_EXTENSIONS_DIR``. ares trains through ``torch.distributed`` collectives only, so its engines form
their group without that op; tests/test_deepspeed_start.py holds DeepSpeed to the place it builds it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

SHM_BUILDER_NAME = "ShareMemCommBuilder"


@contextlib.contextmanager
def without_inference_shm_op() -> Iterator[None]:
    """For the duration of the block, DeepSpeed's comm backend forms without building its inference-only
    shared-memory op (it then falls back to ``torch.distributed`` for that call, as on machines without it)."""
    import importlib

    # the submodule itself: ``deepspeed.comm.torch`` as an attribute is the torch package
    ds_torch = importlib.import_module("deepspeed.comm.torch")

    original = getattr(ds_torch, "build_shm_op", None)
    if original is None:  # a DeepSpeed that builds no such op at comm start
        yield
        return
    ds_torch.build_shm_op = _no_op
    try:
        yield
    finally:
        ds_torch.build_shm_op = original


def _no_op():
    return None
