"""Artifact store: content keys, partial work directories, resume, manifests, lineage and verification.

Layout: ``<root>/<stage>/<stage>-<key12>/`` holding the stage's files and ``manifest.json`` (written last).
Work happens in ``<stage>-<key12>.partial/`` and is renamed when complete, so a half-written artifact never
looks finished. The key hashes {stage, code version, resolved config, input ids / sha256}: the same key and
a complete directory means "up to date".
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ares_cli import __version__
from ares_cli.errors import InputError, IntegrityError, StageFailure
from ares_cli.hashing import canonical_json, sha256_file, sha256_text, strict_json

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".partial"
LOCK_FILE = ".lock"


@dataclass(frozen=True)
class InputRef:
    """One input of a stage: an artifact (by id) or a file, with the content hash that keys the stage."""

    role: str
    path: str
    sha256: str
    artifact_id: str | None = None

    def key_part(self) -> dict[str, str]:
        return {"role": self.role, "id": self.artifact_id or "", "sha256": self.sha256}


def stage_key(stage: str, code_version: str, config: dict[str, Any], inputs: list[InputRef]) -> str:
    """The 12-hex content key of a stage run."""
    payload = {
        "stage": stage,
        "code_version": code_version,
        "config": config,
        "inputs": sorted((ref.key_part() for ref in inputs), key=canonical_json),
    }
    return sha256_text(canonical_json(payload))[:12]


def _git_state() -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}
    if sha.returncode != 0:
        return {"sha": None, "dirty": None}
    return {"sha": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return env


def describe_outputs(directory: Path) -> list[dict[str, Any]]:
    """Path, sha256, bytes (and rows for JSONL) of every file under ``directory`` except the manifest."""
    outputs = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel in (MANIFEST, LOCK_FILE):
            continue
        entry: dict[str, Any] = {"path": rel, "sha256": sha256_file(path), "bytes": path.stat().st_size}
        if path.suffix == ".jsonl":
            with open(path, "rb") as handle:
                entry["rows"] = sum(1 for line in handle if line.strip())
        outputs.append(entry)
    return outputs


class RowLog:
    """Append-only JSONL of keyed rows inside a partial artifact: the resume API.

    Rows already on disk are loaded (a torn last line from a killed writer is dropped); ``write`` refuses a
    key that is already present, so a resumed stage fills exactly the missing rows.
    """

    def __init__(self, path: Path, key_fields: tuple[str, ...]):
        self.path, self.key_fields = path, key_fields
        self.rows: dict[tuple, dict[str, Any]] = {}
        self._load()
        self._handle = open(path, "a", encoding="utf-8")

    def key(self, row: dict[str, Any]) -> tuple:
        try:
            return tuple(row[name] for name in self.key_fields)
        except KeyError as missing:
            raise StageFailure(f"{self.path.name}: row lacks key field {missing}") from None

    def _load(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        good_end = 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn write: the process died mid-line
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            self.rows[self.key(row)] = row
            good_end += len(line)
        if good_end != len(raw):
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)

    def __contains__(self, key: tuple) -> bool:
        return key in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append rows durably (flush + fsync); a key already present is an error."""
        lines = []
        for row in rows:
            key = self.key(row)
            if key in self.rows:
                raise StageFailure(f"{self.path.name}: duplicate row {key}")
            self.rows[key] = row
            lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        self._handle.write("".join(lines))
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self, *, sort: bool = True) -> None:
        """Close; with ``sort`` rewrite the file in key order so every run gives identical bytes."""
        self._handle.close()
        if sort:
            ordered = [self.rows[key] for key in sorted(self.rows)]
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as handle:
                for row in ordered:
                    handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            os.replace(tmp, self.path)


@dataclass
class StageRun:
    """One run of a stage: where to write, whether it is already done, and how to finish it."""

    store: ArtifactStore
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
        """Close row logs, write ``manifest.json`` last, rename the partial directory into place."""
        for log in self._logs:
            if not log._handle.closed:
                log.close()
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "stage": self.stage,
            "artifact_id": self.artifact_id,
            "status": "complete",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "duration_s": round(time.time() - self.started, 3),
            "ares_version": __version__,
            "code_version": self.code_version,
            "git": _git_state(),
            "argv": self.argv,
            "config": self.config,
            "config_hash": sha256_text(canonical_json(self.config)),
            "seeds": self.seeds,
            "inputs": [asdict(ref) for ref in self.inputs],
            "outputs": describe_outputs(self.work_dir),
            "stats": stats or {},
            "environment": _environment(),
        }
        tmp = self.work_dir / (MANIFEST + ".tmp")
        tmp.write_text(
            json.dumps(strict_json(manifest), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
        )
        os.replace(tmp, self.work_dir / MANIFEST)
        (self.work_dir / LOCK_FILE).unlink(missing_ok=True)
        if self.final_dir.exists():  # --force over a complete artifact
            shutil.rmtree(self.final_dir)
        os.replace(self.work_dir, self.final_dir)
        self.release()
        return self.final_dir

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


class ArtifactStore:
    """The on-disk store rooted at ``root`` (``--artifacts-root`` / ``ARES_ARTIFACTS``)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def open_stage(
        self,
        stage: str,
        *,
        code_version: str,
        config: dict[str, Any],
        inputs: list[InputRef],
        seeds: dict[str, Any] | None = None,
        argv: list[str] | None = None,
        force: bool = False,
    ) -> StageRun:
        """Start (or resume) a stage run; ``up_to_date`` is set when a complete artifact has the same key."""
        key = stage_key(stage, code_version, config, inputs)
        artifact_id = f"{stage}-{key}"
        final_dir = self.root / stage / artifact_id
        work_dir = final_dir.with_name(artifact_id + PARTIAL_SUFFIX)
        run = StageRun(self, stage, artifact_id, final_dir, work_dir, config, code_version, list(inputs))
        run.seeds, run.argv = dict(seeds or {}), list(argv if argv is not None else sys.argv)
        if (final_dir / MANIFEST).exists() and not force:
            run.up_to_date = True
            return run
        work_dir.mkdir(parents=True, exist_ok=True)
        lock = open(work_dir / LOCK_FILE, "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StageFailure(f"{work_dir} is locked by another running '{stage}'") from None
        run._lock = lock
        if force:
            for child in work_dir.iterdir():
                if child.name != LOCK_FILE:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        run.resumed = any(child.name != LOCK_FILE for child in work_dir.iterdir())
        return run

    # ---- lookup -------------------------------------------------------------------------------------
    def resolve(self, ref: str | Path) -> Path:
        """The directory of an artifact given its id (``stage-key``), a unique id prefix, or a path."""
        path = Path(ref)
        if (path / MANIFEST).exists():
            return path
        name = str(ref)
        matches = [m.parent for m in self.root.glob(f"*/{name}*/{MANIFEST}")]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise InputError(f"artifact id '{name}' is ambiguous: {', '.join(m.name for m in matches)}")
        raise InputError(f"no complete artifact '{name}' under {self.root}")

    def manifest(self, ref: str | Path) -> dict[str, Any]:
        path = self.resolve(ref) / MANIFEST
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise IntegrityError(f"{path}: not valid JSON ({err})") from None

    def input_ref(self, role: str, ref: str | Path) -> InputRef:
        """An InputRef for an artifact (keyed by its id and outputs) or a plain file (keyed by sha256)."""
        path = Path(ref)
        if path.is_file():
            return InputRef(role=role, path=str(path), sha256=sha256_file(path))
        directory = self.resolve(ref)
        manifest = self.manifest(directory)
        outputs_hash = sha256_text(canonical_json(manifest.get("outputs", [])))
        return InputRef(
            role=role, path=str(directory), sha256=outputs_hash, artifact_id=manifest["artifact_id"]
        )

    def list(self, stage: str | None = None) -> list[dict[str, Any]]:
        """Summaries of complete and partial artifacts, newest first."""
        entries = []
        pattern = f"{stage}/*" if stage else "*/*"
        for directory in sorted(self.root.glob(pattern)):
            if not directory.is_dir():
                continue
            if directory.name.endswith(PARTIAL_SUFFIX):
                entries.append(
                    {
                        "artifact_id": directory.name,
                        "stage": directory.parent.name,
                        "status": "partial",
                        "created": None,
                        "path": str(directory),
                    }
                )
                continue
            if not (directory / MANIFEST).exists():
                continue
            manifest = self.manifest(directory)
            rows = sum(out.get("rows", 0) for out in manifest.get("outputs", []))
            size = sum(out.get("bytes", 0) for out in manifest.get("outputs", []))
            entries.append(
                {
                    "artifact_id": manifest["artifact_id"],
                    "stage": manifest["stage"],
                    "status": manifest["status"],
                    "created": manifest["created"],
                    "rows": rows,
                    "bytes": size,
                    "path": str(directory),
                }
            )
        return sorted(entries, key=lambda e: e["created"] or "9999", reverse=True)

    def lineage(self, ref: str | Path) -> dict[str, Any]:
        """The tree of inputs of an artifact, recursively (files are leaves)."""
        manifest = self.manifest(ref)
        node = {"artifact_id": manifest["artifact_id"], "stage": manifest["stage"], "inputs": []}
        for item in manifest.get("inputs", []):
            child: dict[str, Any] = {"role": item["role"], "path": item["path"], "sha256": item["sha256"]}
            if item.get("artifact_id"):
                try:
                    child.update(self.lineage(item["path"]))
                except InputError:
                    child["missing"] = True
            node["inputs"].append(child)
        return node

    def verify(self, ref: str | Path) -> dict[str, Any]:
        """Re-hash every output; raise IntegrityError naming each file that does not match."""
        directory = self.resolve(ref)
        manifest = self.manifest(directory)
        problems = []
        recorded = {out["path"]: out for out in manifest.get("outputs", [])}
        for rel, out in recorded.items():
            path = directory / rel
            if not path.is_file():
                problems.append(f"{path}: missing")
            elif path.stat().st_size != out["bytes"] or sha256_file(path) != out["sha256"]:
                problems.append(f"{path}: sha256 does not match the manifest")
        for extra in describe_outputs(directory):
            if extra["path"] not in recorded:
                problems.append(f"{directory / extra['path']}: not listed in the manifest")
        if problems:
            raise IntegrityError(f"{manifest['artifact_id']}: " + "; ".join(problems))
        return {"artifact_id": manifest["artifact_id"], "files": len(recorded), "status": "ok"}
