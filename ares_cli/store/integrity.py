"""Checking an artifact's files against its manifest, and the record that lets an unchanged file skip re-hashing.

Every stage verifies an input artifact before reading it (:meth:`ArtifactStore.input_ref`): each file the
manifest lists must exist with the recorded size and sha256, no unlisted file may sit beside them, and
the manifest itself must be well formed. Hashing a 15 GB model at every stage start would be slow, so a
:class:`VerificationRecord` (``<artifacts root>/.verified.json``) remembers the sha256 of a file together
with the stat it had when hashed: size, mtime_ns, ctime_ns, inode and device. A file whose stat is
unchanged is trusted without re-reading; any write, ``touch``, copy, rename of the file or chmod changes
the stat, and the file is hashed again. What the record cannot see is a change below the file system
(bit rot, a disk edited raw) which keeps the stat: ``ares artifacts verify`` always re-hashes for that.
A forged or edited record is trusted too (it is a cache in the store, not a signature): whoever can write
``.verified.json`` can write the artifacts, and ``ares artifacts verify`` re-hashes every file whatever
the record says.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from ares_cli.errors import IntegrityError
from ares_cli.store.hashing import sha256_file

__all__ = [
    "RECORD_FILE", "stat_key", "VerificationRecord", "check_manifest", "is_artifact_id", "placement_problem",
    "output_problems", "listed_output"
]  # fmt: skip

RECORD_FILE = ".verified.json"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ARTIFACT_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*-[0-9a-f]{12}")


def stat_key(stat: os.stat_result) -> list[int]:
    """The parts of a stat that change whenever a file's bytes can have changed."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


class VerificationRecord:
    """sha256 of files by absolute path, trusted only while the file's :func:`stat_key` is unchanged.

    ``path=None`` keeps the record in memory only. The file is a cache: unreadable or malformed, it is
    ignored; unwritable (read-only store), it is not saved (one warning on stderr). Saving merges with what other processes wrote
    since it was read and replaces the file atomically.
    """

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict[str, Any]] = self._read()
        self._dirty: dict[str, dict[str, Any]] = {}
        self._warned = False

    def _read(self) -> dict[str, dict[str, Any]]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        files = data.get("files") if isinstance(data, dict) else None
        return {k: v for k, v in files.items() if _valid_entry(v)} if isinstance(files, dict) else {}

    def sha256(self, path: Path, *, rehash: bool = False) -> str:
        """The file's sha256: from the record when its stat is unchanged (and not ``rehash``), else hashed."""
        path = Path(path).absolute()
        before = stat_key(path.stat())
        entry = self.entries.get(str(path))
        if not rehash and entry is not None and entry["stat"] == before:
            return entry["sha256"]
        digest = sha256_file(path)
        if stat_key(path.stat()) == before:  # not written to while it was read
            self.remember(path, digest, before)
        return digest

    def remember(self, path: Path, sha256: str, stat: list[int]) -> None:
        entry = {"sha256": sha256, "stat": list(stat)}
        self.entries[str(Path(path).absolute())] = entry
        self._dirty[str(Path(path).absolute())] = entry

    def save(self) -> None:
        """Merge new entries into the file (dropping entries of deleted files); a no-op when nothing changed."""
        if self.path is None or not self._dirty or not self.path.parent.is_dir():
            return
        merged = {**self._read(), **self._dirty}
        merged = {k: v for k, v in merged.items() if os.path.exists(k)}
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"files": merged}, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as err:  # a read-only or full store still verifies; it only hashes again next time
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # unlink on a read-only file system fails even for a missing file
                pass
            if not self._warned:
                self._warned = True
                print(
                    f"warning: cannot save the verification record {self.path} ({err.strerror or err}); "
                    "files are hashed again next time",
                    file=sys.stderr,
                )
            return
        self.entries, self._dirty = merged, {}


def _valid_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("sha256"), str)
        and isinstance(entry.get("stat"), list)
        and len(entry["stat"]) == 5
    )


def check_manifest(manifest: Any, path: Path) -> dict[str, Any]:
    """``manifest`` if it has the fields every reader relies on; IntegrityError naming what is wrong."""

    def bad(what: str) -> IntegrityError:
        return IntegrityError(f"{path}: corrupt manifest ({what})")

    if not isinstance(manifest, dict):
        raise bad(f"expected a JSON object, got {type(manifest).__name__}")
    for name in ("artifact_id", "stage", "status"):
        if not isinstance(manifest.get(name), str):
            raise bad(f"'{name}' missing or not text")
    if not is_artifact_id(manifest["artifact_id"]):  # it names a directory: no separator, no '..'
        raise bad(f"artifact id {manifest['artifact_id']!r} is not of the form <stage>-<12 hex digits>")
    if not manifest["artifact_id"].startswith(manifest["stage"] + "-"):
        raise bad(f"artifact id {manifest['artifact_id']!r} is not of stage {manifest['stage']!r}")
    outputs = manifest.get("outputs")
    if not isinstance(outputs, list):
        raise bad("'outputs' missing or not a list")
    for i, out in enumerate(outputs):
        if not (
            isinstance(out, dict)
            and isinstance(out.get("path"), str)
            and isinstance(out.get("sha256"), str)
            and _HEX64.match(out["sha256"])
            and isinstance(out.get("bytes"), int)
        ):
            raise bad(f"outputs[{i}] lacks a path, a sha256 or a byte count")
        rel = Path(out["path"])
        if rel.is_absolute() or ".." in rel.parts:
            raise bad(f"outputs[{i}] path {out['path']!r} leaves the artifact directory")
    for name in ("config", "stats"):
        if not isinstance(manifest.get(name, {}), dict):
            raise bad(f"'{name}' is not an object")
    inputs = manifest.get("inputs", [])
    if not isinstance(inputs, list):
        raise bad("'inputs' is not a list")
    for i, item in enumerate(inputs):
        if not (
            isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("role", "path", "sha256"))
        ):
            raise bad(f"inputs[{i}] lacks a role, a path or a sha256")
    return manifest


def is_artifact_id(name: str) -> bool:
    """Whether ``name`` has the form of an artifact id (``<stage>-<12 hex>``)."""
    return _ARTIFACT_ID.fullmatch(name) is not None


def placement_problem(directory: Path, manifest: dict[str, Any]) -> str | None:
    """Why ``manifest`` does not belong in ``directory`` (a manifest copied over from another artifact), or None.

    A directory named like an artifact id must carry that id; a copy under another name (``/tmp/my-model``)
    is not held to it.
    """
    if is_artifact_id(directory.name) and manifest["artifact_id"] != directory.name:
        return f"names artifact {manifest['artifact_id']}, but lies in {directory.name}"
    return None


def output_problems(
    directory: Path,
    manifest: dict[str, Any],
    record: VerificationRecord,
    *,
    rehash: bool = False,
    ignore: tuple[str, ...] = (),
) -> list[str]:
    """One line per file of ``directory`` that is missing, resized, altered or not listed in ``manifest``."""
    problems = []
    listed = set()
    for out in manifest["outputs"]:
        path = directory / out["path"]
        listed.add(out["path"])
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif (size := path.stat().st_size) != out["bytes"]:
            problems.append(f"{path}: {size} bytes, the manifest records {out['bytes']}")
        elif record.sha256(path, rehash=rehash) != out["sha256"]:
            problems.append(f"{path}: sha256 does not match the manifest")
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel not in listed and rel not in ignore:
            problems.append(f"{path}: not listed in the manifest")
    return problems


def listed_output(directory: Path, manifest: dict[str, Any], file: Path) -> dict[str, Any] | None:
    """The manifest entry of ``file`` inside ``directory``, or None when the manifest does not list it."""
    try:
        rel = file.absolute().relative_to(directory.absolute()).as_posix()
    except ValueError:
        return None
    return next((out for out in manifest["outputs"] if out["path"] == rel), None)
