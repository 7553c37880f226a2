"""Artifact store: content keys, partial work directories, resume, manifests, lineage and verification.

Layout: ``<root>/<stage>/<stage>-<key12>/`` holding the stage's files and ``manifest.json`` (written last).
Work happens in ``<stage>-<key12>.partial/`` and is renamed when complete, so a half-written artifact never
looks finished. The key hashes {stage, code version, resolved config, input ids / sha256}: the same key and
a complete directory means "up to date".
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, IntegrityError, StageLocked, UsageError, storage_error
from ares_cli.store.hashing import canonical_json, sha256_text
from ares_cli.store.integrity import (
    RECORD_FILE,
    VerificationRecord,
    check_manifest,
    is_artifact_id,
    output_problems,
    placement_problem,
    stat_key,
)
from ares_cli.store.provenance import LOCK_FILE, MANIFEST
from ares_cli.store.stage_run import SCHEMA_VERSION, InputRef, StageRun

__all__ = [
    "SCHEMA_VERSION", "PARTIAL_SUFFIX", "InputRef", "stage_key", "StageRun", "ArtifactStore",
    "verify_enclosing"
]  # fmt: skip

PARTIAL_SUFFIX = ".partial"


def stage_key(stage: str, code_version: str, config: dict[str, Any], inputs: list[InputRef]) -> str:
    """The 12-hex content key of a stage run."""
    payload = {
        "stage": stage,
        "code_version": code_version,
        "config": config,
        "inputs": sorted((ref.key_part() for ref in inputs), key=canonical_json),
    }
    return sha256_text(canonical_json(payload))[:12]


class ArtifactStore:
    """The on-disk store rooted at ``root`` (``--artifacts-root`` / ``ARES_ARTIFACTS``)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.record = VerificationRecord(self.root / RECORD_FILE)
        self._verified: set[Path] = set()

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
        final_dir, work_dir = self.stage_dirs(stage, code_version=code_version, config=config, inputs=inputs)
        artifact_id = final_dir.name
        run = StageRun(self, stage, artifact_id, final_dir, work_dir, config, code_version, list(inputs))
        run.seeds, run.argv = dict(seeds or {}), list(argv if argv is not None else sys.argv)
        if (final_dir / MANIFEST).exists() and not force:
            run.up_to_date = True
            return run
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
            lock = open(work_dir / LOCK_FILE, "a+")
        except OSError as err:  # a read-only or full artifacts root: one clear line, also on other ranks
            raise (storage_error(err) or err) from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()
            lock.close()
            raise StageLocked(
                f"{work_dir} is locked by another running '{stage}'{f' (pid {holder})' if holder else ''}; "
                f"nothing was done: rerun when it has finished"
            ) from None
        try:  # the holder's pid, for the message another run gets
            lock.seek(0)
            lock.truncate()
            lock.write(f"{os.getpid()}\n")
            lock.flush()
        except OSError as err:
            lock.close()
            err.filename = err.filename or str(work_dir / LOCK_FILE)
            raise (storage_error(err) or err) from None
        run._lock = lock
        if force:
            for child in work_dir.iterdir():
                if child.name != LOCK_FILE:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        run.resumed = any(child.name != LOCK_FILE for child in work_dir.iterdir())
        return run

    def stage_dirs(
        self, stage: str, *, code_version: str, config: dict[str, Any], inputs: list[InputRef]
    ) -> tuple[Path, Path]:
        """(complete directory, partial directory) a stage run with this key would use; creates nothing."""
        artifact_id = f"{stage}-{stage_key(stage, code_version, config, inputs)}"
        final_dir = self.root / stage / artifact_id
        return final_dir, final_dir.with_name(artifact_id + PARTIAL_SUFFIX)

    # ---- lookup -------------------------------------------------------------------------------------
    def resolve(self, ref: str | Path) -> Path:
        """The directory of an artifact given its id (``stage-key``), a unique id prefix, or a path."""
        path = Path(ref)
        if (path / MANIFEST).exists():
            return path
        name = str(ref)
        if not name or "/" in name or os.sep in name or name.startswith("."):  # a path, not an id
            raise InputError(f"no complete artifact '{name}' under {self.root}")
        matches = [
            m.parent for m in self.root.glob(f"*/{glob.escape(name)}*/{MANIFEST}")
        ]  # ids, not patterns
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise InputError(f"artifact id '{name}' is ambiguous: {', '.join(m.name for m in matches)}")
        raise InputError(f"no complete artifact '{name}' under {self.root}")

    def manifest(self, ref: str | Path) -> dict[str, Any]:
        """The parsed ``manifest.json`` of an artifact; IntegrityError when it is unreadable or malformed."""
        path = self.resolve(ref) / MANIFEST
        try:
            return check_manifest(json.loads(path.read_text(encoding="utf-8")), path)
        except (ValueError, OSError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise IntegrityError(f"{path}: corrupt manifest (not valid JSON: {err})") from None

    def verified(self, ref: str | Path) -> Path:
        """The directory of an artifact whose files all match its manifest (checked once per store object).

        Unchanged files are not re-read (:class:`VerificationRecord`); IntegrityError names each bad file.
        """
        directory = self.resolve(ref)
        if directory.absolute() not in self._verified:
            self.verify(directory, rehash=False)
            self._verified.add(directory.absolute())
        return directory

    def input_ref(self, role: str, ref: str | Path) -> InputRef:
        """An InputRef for an artifact (keyed by its id and outputs) or a plain file (keyed by sha256).

        The artifact, or the artifact a file lies in, is verified against its manifest first (exit 4).
        """
        path = Path(ref)
        if path.is_file():
            enclosing = _enclosing_artifact(path)
            if enclosing is not None:
                self.verified(enclosing)
            digest = self.record.sha256(path)
            self.record.save()
            return InputRef(role=role, path=str(path), sha256=digest)
        directory = self.verified(ref)
        manifest = self.manifest(directory)
        outputs_hash = sha256_text(canonical_json(manifest.get("outputs", [])))
        return InputRef(
            role=role, path=str(directory), sha256=outputs_hash, artifact_id=manifest["artifact_id"]
        )

    def remember_outputs(self, directory: Path, outputs: list[dict], stats: dict[str, list[int]]) -> None:
        """Record the hashes a stage just computed for its outputs, so its consumers need not re-hash."""
        for out in outputs:
            path = directory / out["path"]
            try:
                unchanged = stat_key(path.stat()) == stats.get(out["path"])
            except OSError:
                continue
            if unchanged:
                self.record.remember(path, out["sha256"], stats[out["path"]])
        self.record.save()

    def list(self, stage: str | None = None) -> list[dict[str, Any]]:
        """Summaries of complete and partial artifacts, newest first (``stage``: one stage's directory)."""
        if stage is not None and not (stage and stage.replace("_", "").replace("-", "").isalnum()):
            raise UsageError(f"--stage {stage!r} is not a stage name (letters, digits, '_', '-')")
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
            try:
                manifest = self.manifest(directory)
            except IntegrityError as err:  # one corrupt manifest must not hide the rest of the store
                entries.append(
                    {
                        "artifact_id": directory.name,
                        "stage": directory.parent.name,
                        "status": "corrupt",
                        "created": None,
                        "error": str(err),
                        "path": str(directory),
                    }
                )
                continue
            rows = sum(out.get("rows", 0) for out in manifest.get("outputs", []))
            size = sum(out.get("bytes", 0) for out in manifest.get("outputs", []))
            entries.append(
                {
                    "artifact_id": manifest["artifact_id"],
                    "stage": manifest["stage"],
                    "status": manifest["status"],
                    "created": manifest.get("created"),
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
                    child.update(self.lineage(self._input_directory(item)))
                except InputError:
                    child["missing"] = True
                except IntegrityError as err:  # a corrupt manifest upstream: shown, the rest still traced
                    child["corrupt"] = str(err)
            node["inputs"].append(child)
        return node

    def _input_directory(self, item: dict[str, Any]) -> Path:
        """Where a manifest's input artifact lies: by its id in this store, else at its recorded path only
        when that is a directory named by the id (a manifest's strings never lead anywhere else)."""
        artifact_id = str(item["artifact_id"])
        if not is_artifact_id(artifact_id):
            raise IntegrityError(f"input artifact id {artifact_id!r} is not of the form <stage>-<12 hex>")
        try:
            return self.resolve(artifact_id)
        except InputError:
            recorded = Path(str(item.get("path", "")))
            if recorded.name == artifact_id and (recorded / MANIFEST).is_file():
                return recorded
            raise

    def verify(self, ref: str | Path, *, rehash: bool = True) -> dict[str, Any]:
        """Check every file against the manifest; IntegrityError naming each file that does not match.

        ``rehash`` (``ares artifacts verify``) reads every byte again; without it a file whose stat is
        unchanged since it was last hashed is taken from the verification record.
        """
        directory = self.resolve(ref)
        manifest = self.manifest(directory)
        misplaced = placement_problem(directory, manifest)
        if misplaced:  # a manifest copied from another artifact would lend this directory its identity
            raise IntegrityError(f"{directory / MANIFEST}: {misplaced}")
        problems = output_problems(
            directory, manifest, self.record, rehash=rehash, ignore=(MANIFEST, LOCK_FILE)
        )
        self.record.save()
        if problems:
            raise IntegrityError(f"{manifest['artifact_id']}: " + "; ".join(problems))
        return {"artifact_id": manifest["artifact_id"], "files": len(manifest["outputs"]), "status": "ok"}


def _enclosing_artifact(path: Path) -> Path | None:
    """The artifact directory ``path`` is or lies in (the nearest one holding a ``manifest.json``), if any."""
    path = path.absolute()
    for parent in [path, *path.parents] if path.is_dir() else path.parents:
        if (parent / MANIFEST).is_file():
            return parent
    return None


def verify_enclosing(path: str | Path) -> None:
    """Verify the artifact a local input file or directory lies in, if it lies in one (IntegrityError)."""
    directory = _enclosing_artifact(Path(path))
    if directory is None:
        return
    store = ArtifactStore(directory.parent.parent)
    if not is_artifact_id(
        directory.name
    ):  # a copy outside any store: verified, but no record file left there
        store.record = VerificationRecord(None)
    store.verified(directory)
