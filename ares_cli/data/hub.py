"""Hugging Face hub ids: fail at once, with a clear message, when an id is not cached and cannot be fetched.

Without this, transformers and datasets retry an unreachable hub for 25-40 s before a traceback. An id that is
in the local cache is left to the libraries; one that is not is refused (exit 3) when offline mode is on
(``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` or ``HF_DATASETS_OFFLINE``) or when one quick connection to the
hub endpoint fails.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from ares_cli.errors import InputError

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
PROBE_TIMEOUT_S = 3.0


def offline_requested() -> bool:
    """Whether any of the Hugging Face offline switches is on."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_VARIABLES)


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """One TCP connection to the hub endpoint (``HF_ENDPOINT``, default huggingface.co:443)."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _hub_cache() -> Path:
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit)
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def is_cached(repo_id: str, kind: Literal["model", "dataset"]) -> bool:
    """Whether the hub cache (or, for datasets, the datasets cache) holds anything of ``repo_id``."""
    folder = f"{kind}s--{repo_id.replace('/', '--')}"
    if (_hub_cache() / folder / "snapshots").is_dir():
        return True
    if kind == "dataset":
        home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
        datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets"))
        return (datasets_cache / repo_id.replace("/", "___")).is_dir()
    return False


def require_fetchable(repo_id: str, kind: Literal["model", "dataset"]) -> None:
    """Raise an InputError at once when ``repo_id`` is neither cached nor fetchable right now."""
    if is_cached(repo_id, kind):
        return
    if offline_requested():
        raise InputError(
            f"{kind} '{repo_id}' is not in the local Hugging Face cache and offline mode is on "
            f"({', '.join(v for v in OFFLINE_VARIABLES if os.environ.get(v))}); download it first or give a local path"
        )
    if not hub_reachable():
        raise InputError(
            f"{kind} '{repo_id}' is not in the local Hugging Face cache and the hub cannot be reached "
            f"({os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}); give a local path or download it first"
        )
