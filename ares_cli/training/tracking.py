"""Where a training run's metric rows go: ``metrics.jsonl`` always, TensorBoard and W&B on request.

``--report-to jsonl,tensorboard,wandb`` on ``sft`` and ``rl``. Every row the trainer writes goes to each
tracker under the same names and at the row's ``step`` (rank 0 only; other ranks hold a no-op log).

Resume keeps each curve continuous:

- ``metrics.jsonl`` (a RowLog keyed by ``step``) first drops rows written after the checkpoint the run
  resumes from (a killed run got further than its last checkpoint), so no step is ever duplicated;
- TensorBoard's writer opens with ``purge_step = resumed step + 1``: readers discard the killed run's events
  from that step on, and the resumed run's events continue the same curves;
- W&B resumes the run whose id is the artifact id (``resume="allow"``) and logs at the row's step; W&B
  keeps steps increasing, so steps a killed run logged past its checkpoint keep their first values there
  (offline, each attempt is its own run directory under ``wandb/``, synced with ``wandb sync``).

W&B runs offline unless ``WANDB_MODE`` says otherwise or an API key is configured (``WANDB_API_KEY``); the
resolved config and the artifact id are recorded in the run's config.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ares_cli.errors import UsageError

METRICS = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
TRACKERS = ("jsonl", "tensorboard", "wandb")
_EXTRAS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


def parse_report_to(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"jsonl,tensorboard"`` (or repeated values) -> ordered tracker names, ``jsonl`` always first.

    Raises :class:`UsageError` for an unknown name or a tracker whose package is not installed."""
    words: list[str] = []
    for item in [spec] if isinstance(spec, str) or spec is None else list(spec):
        words += [w.strip().lower() for w in (item or "").split(",") if w.strip()]
    unknown = [w for w in words if w not in TRACKERS and w != "none"]
    if unknown:
        raise UsageError(f"--report-to: unknown tracker '{unknown[0]}' (valid: {', '.join(TRACKERS)})")
    names = tuple(dict.fromkeys(["jsonl", *(w for w in words if w != "none")]))
    for name in names:
        require(name)
    if "wandb" in names:
        wandb_mode()
    return names


WANDB_MODES = ("online", "offline", "disabled", "dryrun", "shared", "run")  # what wandb.init accepts


def wandb_mode() -> str:
    """The W&B mode of this run, checked before any work: ``WANDB_MODE`` must be one wandb accepts, and
    an online run needs credentials (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE`` or a ``wandb login``
    entry in ~/.netrc); otherwise a UsageError instead of W&B's own traceback after training started."""
    mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    if mode not in WANDB_MODES:
        raise UsageError(f"WANDB_MODE={mode!r} is not a W&B mode (valid: {', '.join(WANDB_MODES)})")
    if mode in ("online", "shared", "run") and not _wandb_credentials():
        raise UsageError(
            f"--report-to wandb with WANDB_MODE={mode} needs W&B credentials: set WANDB_API_KEY or run "
            "'wandb login', or set WANDB_MODE=offline (then 'wandb sync' the run directory)"
        )
    return mode


def _wandb_credentials() -> bool:
    """An API key or identity token in the environment, or a netrc entry for the W&B host."""
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def require(name: str) -> None:
    """Fail with an installation hint when the package behind tracker ``name`` is missing."""
    if name not in _EXTRAS:
        return
    import importlib.util

    module, extra = _EXTRAS[name]
    if importlib.util.find_spec(module) is None:
        raise UsageError(
            f"--report-to {name} needs the '{module}' package: pip install 'ares-cli[{extra}]' "
            f"(or pip install {module})"
        )


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's finite numeric values except ``step`` (booleans as 0/1), as floats."""
    out = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, str) or value is None:
            continue
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


def trim_rows(path: Path, last_step: int) -> None:
    """Drop rows with ``step > last_step`` (and a torn last line) from a metrics JSONL, atomically.

    A complete row that is not an object with an integer ``step`` is an InputError naming the row (the
    log was edited or damaged; rerun with ``--force`` to start over)."""
    from ares_cli.errors import InputError

    if not path.exists():
        return
    keep = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True), start=1):
        if not line.endswith("\n"):
            break
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise InputError(
                f"a metric row needs an integer 'step', got {step!r}: the partial run's log is damaged; "
                "rerun with --force to start over",
                file=path, row=number, field="step",
            )  # fmt: skip
        if step <= last_step:
            keep.append(line)
    tmp = path.with_suffix(".trim")
    tmp.write_text("".join(keep), encoding="utf-8")
    os.replace(tmp, path)


class MetricLog:
    """``metrics.jsonl`` plus the requested trackers, on rank 0; a no-op on other ranks.

    ``config`` (the resolved run config, a JSON-able dict) and ``run_id`` (the artifact id) go to W&B."""

    def __init__(
        self,
        out_dir: str | Path,
        *,
        resumed_step: int,
        is_main: bool,
        report_to: Iterable[str] = ("jsonl",),
        config: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        project: str = "ares",
    ):
        from ares_cli.store.rowlog import RowLog

        self.rows, self.trackers = None, []
        if not is_main:
            return
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / METRICS
        trim_rows(path, resumed_step)
        self.rows = RowLog(path, ("step",))
        run_id = run_id or artifact_id_of(out_dir)
        for name in report_to:
            if name == "tensorboard":
                self.trackers.append(_TensorBoard(out_dir / TENSORBOARD_DIR, resumed_step))
            elif name == "wandb":
                self.trackers.append(_WandB(out_dir, run_id, dict(config or {}), project))

    def __contains__(self, step: int) -> bool:
        return self.rows is not None and (step,) in self.rows

    def write(self, row: Mapping[str, Any]) -> None:
        """Append ``row`` (keyed by its ``step``) unless that step is already logged."""
        if self.rows is None or (row["step"],) in self.rows:
            return
        self.rows.write([dict(row)])
        values = scalars(row)
        for tracker in self.trackers:
            tracker.log(int(row["step"]), values)

    def close(self) -> None:
        if self.rows is not None:
            self.rows.close()
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


def artifact_id_of(work_dir: Path) -> str:
    """The artifact id of a stage's work directory (``rl-<key>.partial`` -> ``rl-<key>``)."""
    name = Path(work_dir).name
    return name[: -len(".partial")] if name.endswith(".partial") else name


class _TensorBoard:
    def __init__(self, log_dir: Path, resumed_step: int):
        require("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: readers drop earlier events from this step on (a killed run's steps past its
        # checkpoint, or all of a run restarted from scratch), so the curves continue without duplicates.
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=resumed_step + 1)

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, directory: Path, run_id: str, config: dict[str, Any], project: str):
        require("wandb")
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        mode = wandb_mode()
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", project),
            id=run_id,
            name=run_id,
            dir=str(directory),
            mode=mode,
            resume="allow",
            config={**config, "artifact_id": run_id},
            settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        import wandb

        self.run.finish()
        wandb.teardown()  # waits for wandb's service to write everything before the artifact is hashed
