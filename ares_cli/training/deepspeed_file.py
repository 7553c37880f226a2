"""A DeepSpeed config file as untrusted input: read bounded, typed where ares reads it, and refused at
plan time when ares's optimizer cannot run with it.

:func:`read_deepspeed_file` reads the file through :mod:`ares_cli.store.untrusted` (a FIFO, a directory
or an oversized file is refused before a byte is read; JSON and YAML are bounded in depth and free of
NaN/Infinity) and types the keys ares itself reads or fills (the batch keys, ``gradient_clipping``,
``bf16``/``fp16``, ``zero_optimization``) with :mod:`ares_cli.store.values`. DeepSpeed's own parser
checks the rest (``check_deepspeed_config``); :func:`runnable_with_ares` then refuses, with DeepSpeed's
reason, the settings it accepts but that fail later with ares's client ``torch.optim.AdamW``:

- ``offload_optimizer`` to ``cpu``/``nvme`` without ``"zero_force_ds_cpu_optimizer": false``: DeepSpeed's
  ``engine._configure_optimizer`` raises ``ZeRORuntimeException`` at ``deepspeed.initialize`` (read in
  DeepSpeed 0.19.8, and reproduced: a one-layer model on CPU fails there, and runs with the key set);
- ZeRO stage 0 (DeepSpeed's default when ``zero_optimization`` or its ``stage`` is left out): the engine
  wraps AdamW in no ZeRO optimizer, so ares's checkpoint (``checkpoint.optimizer_state``, written every
  ``save_every`` steps and when a run stops early) finds no fp32 partitions and fails with an
  ``AttributeError`` mid-run (reproduced on CPU in fp32 and bf16).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.store.untrusted import MAX_JSON_DEPTH, json_depth, parse_json_bounded, read_bounded
from ares_cli.store.values import At, boolean, count, mapping, number

MAX_DEEPSPEED_BYTES = 1024 * 1024  # a DeepSpeed config is a few hundred bytes
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
OFFLOAD_RULE = (
    'DeepSpeed refuses ZeRO-Offload with a client optimizer unless the file sets "zero_force_ds_cpu_optimizer": '
    'false (deepspeed.initialize raises ZeRORuntimeException: "You are using ZeRO-Offload with a client provided '
    'optimizer ... If you really want to use a custom optimizer w. ZeRO-Offload ... set <"zero_force_ds_cpu_optimizer": '
    'false> in your configuration file."); ares trains with torch.optim.AdamW'
)
STAGE0_RULE = (
    "ZeRO stage 0 wraps ares's AdamW in no ZeRO optimizer, so ares's checkpoints (every save_every steps and "
    "when a run stops early) cannot save its state; use zero_optimization.stage 1, 2 or 3, or leave out "
    "--deepspeed to train with plain torch"
)


def read_deepspeed_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a DeepSpeed JSON/YAML file, with the keys ares reads typed; an InputError naming the
    file (and the field) for anything else."""
    path = Path(path)
    data = read_bounded(path, max_bytes=MAX_DEEPSPEED_BYTES, what="DeepSpeed config file")
    if path.suffix in (".yaml", ".yml"):
        config = _yaml(data, path)
    else:
        try:
            config = parse_json_bounded(data, source=path, what="text")
        except InputError as err:
            raise InputError(f"DeepSpeed config does not parse: {_reason(err, path)}", file=path) from None
    if not isinstance(config, dict):
        raise InputError("DeepSpeed config must be a mapping of keys", file=path)
    check_types(config, path)
    return config


def _reason(err: InputError, path: Path) -> str:
    return str(err).removeprefix(f"{path}: ")


def _yaml(data: bytes, path: Path) -> Any:
    import yaml

    try:
        config = yaml.safe_load(data.decode("utf-8")) or {}
    except UnicodeDecodeError:
        raise InputError("DeepSpeed config does not parse: the text is not UTF-8", file=path) from None
    except RecursionError:
        raise InputError(f"DeepSpeed config nests deeper than {MAX_JSON_DEPTH} levels", file=path) from None
    except yaml.YAMLError as err:
        raise InputError(f"DeepSpeed config does not parse ({err})", file=path) from None
    if json_depth(config) > MAX_JSON_DEPTH:
        raise InputError(f"DeepSpeed config nests deeper than {MAX_JSON_DEPTH} levels", file=path)
    _finite(config, At.in_file(path))
    return config


def _finite(value: Any, at: At) -> None:
    """Refuse a YAML ``.nan`` / ``.inf`` anywhere in the tree (JSON refuses them when it parses)."""
    stack = [(value, at)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise where.error(f"must be a finite number, got {item}")
        if isinstance(item, dict):
            stack += [(v, where.child(str(k))) for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(v, where.child(i)) for i, v in enumerate(item)]


def check_types(config: dict[str, Any], path: str | Path) -> None:
    """The keys ares reads or fills, typed: batch sizes ``"auto"`` or positive integers (not ``true``,
    not ``2.0``), ``gradient_clipping`` ``"auto"`` or a finite number >= 0, ``bf16``/``fp16``/
    ``zero_optimization`` objects, a ZeRO ``stage`` an integer 0..3."""
    at = At.in_file(path)
    for key in BATCH_KEYS:
        if config.get(key, "auto") != "auto":
            count(config[key], at.child(key))
    if config.get("gradient_clipping", "auto") != "auto":
        number(config["gradient_clipping"], at.child("gradient_clipping"), inclusive=True)
    for key in ("bf16", "fp16", "zero_optimization"):
        if key in config:
            mapping(config[key], at.child(key))
    zero = config.get("zero_optimization", {})
    if "stage" in zero:
        count(zero["stage"], at.child("zero_optimization").child("stage"), minimum=0, maximum=3)
    if "zero_force_ds_cpu_optimizer" in config:
        boolean(config["zero_force_ds_cpu_optimizer"], at.child("zero_force_ds_cpu_optimizer"))
    for key in ("offload_optimizer", "offload_param"):
        if zero.get(key) is not None:
            mapping(zero[key], at.child("zero_optimization").child(key))


def runnable_with_ares(parsed, path: str | Path) -> None:
    """Refuse what DeepSpeed's parser accepted (``parsed``: a ``DeepSpeedConfig``) but that cannot train
    with ares's client AdamW (see the module doc), naming the file and the field."""
    at = At.in_file(path)
    zero = parsed.zero_config
    offload = zero.offload_optimizer
    device = "none" if offload is None else str(getattr(offload.device, "value", offload.device))
    if device in ("cpu", "nvme") and parsed.zero_force_ds_cpu_optimizer:
        raise (
            at.child("zero_optimization")
            .child("offload_optimizer")
            .error(f"optimizer offload to {device}: {OFFLOAD_RULE}")
        )
    if int(parsed.zero_optimization_stage) == 0:
        raise at.child("zero_optimization").child("stage").error(STAGE0_RULE)
