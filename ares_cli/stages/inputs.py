"""Resolving a stage's inputs (models and datasets) to paths plus content-hashed :class:`InputRef` s."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ares_cli.data.hub import require_fetchable
from ares_cli.errors import InputError
from ares_cli.stages.model_files import check_model_dir
from ares_cli.store.artifacts import MANIFEST, ArtifactStore, InputRef, verify_enclosing
from ares_cli.store.hashing import canonical_json, sha256_records, sha256_text

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def resolve_model(
    store: ArtifactStore, ref: str | Path, *, role: str = "model", hash_files: bool = True
) -> tuple[str, InputRef | None]:
    """A model given as an artifact id/dir (its ``model/``), a local directory, or an HF hub id.

    Artifacts are verified against their manifest (exit 4 naming a bad file), then keyed by their id and
    output hashes; local directories by the sha256 of their files (an unchanged file is not re-read, see
    :class:`ares_cli.store.integrity.VerificationRecord`; a directory inside an artifact, such as its ``model/``,
    verifies that artifact first); hub ids by the id string (a hub model that changes upstream is not
    detected). ``hash_files=False`` (``ares plan``) runs every check but returns no InputRef for a local
    directory, reading only its headers, never its weights.
    """
    path = Path(ref)
    if path.is_dir() and os.path.lexists(path / "config.json") and not (path / MANIFEST).is_file():
        verify_enclosing(path)
        check_model_dir(path, loads_weights=hash_files)  # config, headers, tokenizer: exit 3 naming the file
        if not hash_files:
            return str(path), None
        files = {
            p.relative_to(path).as_posix(): store.record.sha256(p)
            for p in sorted(path.rglob("*"))
            if p.is_file()
        }
        store.record.save()
        return str(path), InputRef(role=role, path=str(path), sha256=sha256_text(canonical_json(files)))
    try:
        directory = store.resolve(ref)
    except InputError:
        directory = None
    if directory is not None:
        input_ref = store.input_ref(role, directory)  # verified against its manifest first (exit 4)
        model_dir = directory / "model"
        if not (model_dir / "config.json").is_file():
            raise InputError(f"artifact {directory.name} holds no model (no model/config.json)")
        return str(model_dir), input_ref
    text = str(ref)
    if path.exists() or text.startswith((".", "/")) or text.count("/") != 1:
        raise InputError(f"model '{text}' is neither an artifact, a model directory, nor an HF id")
    require_fetchable(text, "model")  # not cached and no hub: fail now, not after the libraries' retries
    return text, InputRef(role=role, path=text, sha256=sha256_text(text))


def deepspeed_config_ref(store: ArtifactStore, path: str, *, hash_file: bool = True) -> InputRef | None:
    """The InputRef of a DeepSpeed JSON config, checked first: a missing file, a FIFO or a directory is an
    InputError (exit 3), before anything opens it."""
    from ares_cli.store.untrusted import regular_file_size

    if not os.path.lexists(path):
        raise InputError("DeepSpeed config file does not exist", file=path)
    regular_file_size(path, what="DeepSpeed config file")
    return store.input_ref("deepspeed", path) if hash_file else None


def data_stats(loaded) -> dict[str, Any]:
    """What loading left out of a dataset, for a stage's artifact stats: source rows, rows kept, duplicates
    dropped (and those with another gold), excluded rows with their reasons, invalid rows skipped."""
    report = loaded.provenance.get("rows_report") or {}
    dup = report.get("duplicates") or {}
    return {
        "source_rows": report.get("source_rows"), "rows": len(loaded.records),
        "duplicates_dropped": dup.get("dropped", 0), "conflicting_golds": dup.get("conflicting_golds", 0),
        "excluded": [{"id": e["id"], "reason": e["reason"]} for e in report.get("excluded", [])],
        "skipped_invalid": report.get("skipped_invalid", {"count": 0, "rows": []}),
    }  # fmt: skip


def dataset_ref(records: list[dict[str, Any]], provenance: dict[str, Any], *, role: str = "data") -> InputRef:
    """An InputRef for loaded problems, keyed by the records themselves (after field map and limit), with
    each image path replaced by the sha256 of its bytes.

    Problems read from a file or directory inside an artifact verify that artifact (exit 4 naming a bad file).
    """
    label = provenance.get("path_or_id") or provenance.get("name") or "data"
    if provenance.get("kind") in ("file", "hf") and Path(str(label)).exists():
        verify_enclosing(Path(str(label)))
    from ares_cli.data.images import hashable_records

    return InputRef(role=role, path=str(label), sha256=sha256_records(hashable_records(records)))
