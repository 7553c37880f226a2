"""One run of a stage (:class:`StageRun`, from :meth:`ArtifactStore.begin
<ares_cli.store.artifacts.ArtifactStore.begin>`): its partial directory, its row logs, and the finish that
writes ``manifest.json`` last and renames the directory into place."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ares_cli import __version__
from ares_cli.errors import StageLocked
from ares_cli.store.hashing import canonical_json, sha256_text, strict_json
from ares_cli.store.provenance import LOCK_FILE, MANIFEST, describe_outputs, environment, git_state
from ares_cli.store.rowlog import RowLog

__all__ = ["SCHEMA_VERSION", "InputRef", "StageRun"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class InputRef:
    """One input of a stage: an artifact (by id) or a file, with the content hash that keys the stage."""

    role: str
    path: str
    sha256: str
    artifact_id: str | None = None

    def key_part(self) -> dict[str, str]:
        return {"role": self.role, "id": self.artifact_id or "", "sha256": self.sha256}


@dataclass
class StageRun:
    """One run of a stage: where to write, whether it is already done, and how to finish it."""

    store: Any  # the ares_cli.store.artifacts.ArtifactStore that began the run
    stage: str
    artifact_id: str
    final_dir: Path
    work_dir: Path
    config: dict[str, Any]
    code_version: str
    inputs: list[InputRef]
    seeds: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    up_to_date: bool = False
    resumed: bool = False
    started: float = field(default_factory=time.time)
    _lock: Any = None
    _logs: list[RowLog] = field(default_factory=list)

    def rows(self, name: str, key_fields: tuple[str, ...]) -> RowLog:
        """A resumable keyed JSONL inside the work directory."""
        log = RowLog(self.work_dir / name, key_fields)
        self._logs.append(log)
        return log

    def finalize(self, stats: dict[str, Any] | None = None) -> Path:
        """Close row logs, write ``manifest.json`` last, rename the partial directory into place.

        StageLocked (exit 75) when the partial directory is no longer the one this run locked.
        """
        self._check_lock()
        for log in self._logs:
            if not log._handle.closed:
                log.close()
        hashed_stats: dict[str, list[int]] = {}
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "stage": self.stage,
            "artifact_id": self.artifact_id,
            "status": "complete",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "duration_s": round(time.time() - self.started, 3),
            "ares_version": __version__,
            "code_version": self.code_version,
            "git": git_state(),
            "argv": self.argv,
            "config": self.config,
            "config_hash": sha256_text(canonical_json(self.config)),
            "seeds": self.seeds,
            "inputs": [asdict(ref) for ref in self.inputs],
            "outputs": describe_outputs(self.work_dir, hashed_stats),
            "stats": stats or {},
            "environment": environment(),
        }
        self._check_lock()
        tmp = self.work_dir / (MANIFEST + ".tmp")
        try:
            tmp.write_text(
                json.dumps(strict_json(manifest), indent=2, sort_keys=True, default=str, allow_nan=False)
                + "\n"
            )
            os.replace(tmp, self.work_dir / MANIFEST)
        except OSError as err:  # a full disk: the outputs stay in the partial directory for the rerun
            tmp.unlink(missing_ok=True)
            err.filename = err.filename or str(tmp)
            raise
        (self.work_dir / LOCK_FILE).unlink(missing_ok=True)
        if self.final_dir.exists():  # --force over a complete artifact
            shutil.rmtree(self.final_dir)
        os.replace(self.work_dir, self.final_dir)
        self.release()
        self.store.remember_outputs(self.final_dir, manifest["outputs"], hashed_stats)
        return self.final_dir

    def _check_lock(self) -> None:
        """StageLocked unless ``work_dir/.lock`` is still the file this run locked (not removed or replaced)."""
        try:
            ours = os.fstat(self._lock.fileno()).st_ino if self._lock is not None else None
            on_disk = os.stat(self.work_dir / LOCK_FILE).st_ino
        except OSError:
            on_disk = None
        if ours is None or ours != on_disk:
            raise StageLocked(
                f"lost the lock on {self.work_dir}: the directory was removed or replaced while this run "
                f"worked, so its result was not published; rerun the same command"
            )

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
