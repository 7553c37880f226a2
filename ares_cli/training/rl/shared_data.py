"""Loading a dataset once per launched run: rank 0 reads, maps and validates; the other ranks receive it.

Under ``torchrun`` / ``deepspeed`` every rank runs the same command. Without this each would read the
source, validate every row and encode every prompt itself (1.8 million rows of DAPO-Math-17k, eight
times). :func:`share_from_main` runs the work on rank 0 only and sends the result to every rank as JSON
(:func:`ares_cli.training.distributed.broadcast_json`, never pickled); an error on rank 0 (bad input: exit
3) is raised there and reported on every other rank with the same exit code, so no rank waits forever.
Records whose images rank 0 wrote to its own image cache are only shared when every rank is on rank 0's
machine; on several machines each rank loads such a dataset itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ares_cli.errors import AresError, InputError


def launched_together(world_size: int) -> bool:
    """Whether this process is one of ``world_size`` ranks started by a launcher (not ``ares plan``'s
    planned ranks, which are not processes)."""
    from ares_cli.training.distributed import launched_ranks

    return world_size > 1 and launched_ranks() == world_size and "MASTER_ADDR" in os.environ


def one_machine() -> bool:
    """Whether every rank runs on this machine: the launcher says so (``LOCAL_WORLD_SIZE`` equals
    ``WORLD_SIZE``); a launcher that does not say is taken to span several machines."""
    local = os.environ.get("LOCAL_WORLD_SIZE")
    return local is not None and local == os.environ.get("WORLD_SIZE", "1")


def share_from_main(
    work: Callable[[], dict[str, Any] | None], receive: Callable[[dict[str, Any]], None]
) -> None:
    """``work()`` on rank 0; its JSON-serialisable result is given to ``receive`` on every other rank (the
    process group is started here when it is not yet). ``None`` from rank 0 tells the other ranks to run
    ``work()`` themselves."""
    from ares_cli.training import distributed

    dist = distributed.init_from_env()
    if dist.is_main:
        try:
            result = work()
        except Exception as err:  # any failure: the other ranks must not wait for data that never comes
            code = err.exit_code if isinstance(err, AresError) else 1
            distributed.broadcast_json({"error": str(err) or type(err).__name__, "exit_code": code})
            raise
        distributed.broadcast_json({"result": result})
        return
    sent = distributed.broadcast_json()
    if "error" in sent:
        failure = InputError(f"rank 0 could not prepare the data: {sent['error']}")
        failure.exit_code = sent.get("exit_code", failure.exit_code)
        raise failure
    if sent["result"] is None:
        work()
    else:
        receive(sent["result"])


def pack(loaded) -> dict[str, Any] | None:
    """A :class:`~ares_cli.data.loader.LoadedDataset` as JSON (None for None)."""
    if loaded is None:
        return None
    manifest = loaded.manifest
    return {"records": loaded.records, "provenance": loaded.provenance, "locations": loaded.locations,
            "manifest": str(manifest.path) if manifest is not None else None}  # fmt: skip


def unpack(data: dict[str, Any] | None):
    """The :class:`~ares_cli.data.loader.LoadedDataset` :func:`pack` wrote (its manifest parsed again)."""
    if data is None:
        return None
    from ares_cli.data.loader import LoadedDataset
    from ares_cli.data.manifests import parse_manifest

    manifest = parse_manifest(data["manifest"]) if data["manifest"] else None
    return LoadedDataset(records=data["records"], provenance=data["provenance"], manifest=manifest,
                         locations=[tuple(x) for x in data["locations"]])  # fmt: skip


def has_images(*loaded) -> bool:
    return any(p.get("images") for d in loaded if d is not None for p in d.records)
