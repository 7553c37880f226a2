"""What a manifest records besides the config: the code's git state, the environment, and every output file."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from ares_cli.store.hashing import sha256_file
from ares_cli.store.integrity import stat_key

__all__ = ["MANIFEST", "LOCK_FILE", "git_state", "environment", "describe_outputs"]

MANIFEST = "manifest.json"
LOCK_FILE = ".lock"


def git_state() -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
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


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return env


def describe_outputs(directory: Path, stats: dict[str, list[int]] | None = None) -> list[dict[str, Any]]:
    """Path, sha256, bytes (and rows for JSONL) of every file under ``directory`` except the manifest.

    ``stats`` (when given) receives each file's :func:`stat_key` as it was when hashed.
    """
    outputs = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel in (MANIFEST, LOCK_FILE):
            continue
        stat = path.stat()
        entry: dict[str, Any] = {"path": rel, "sha256": sha256_file(path), "bytes": stat.st_size}
        if stats is not None:
            stats[rel] = stat_key(stat)
        if path.suffix == ".jsonl":
            with open(path, "rb") as handle:
                entry["rows"] = sum(1 for line in handle if line.strip())
        outputs.append(entry)
    return outputs
