"""Cost of verifying an input artifact at stage start: with the verification record against re-hashing.

Builds an artifact of ``--mb`` MB (one large weights file plus small files, like a model) and times
three ways a stage could check it against its manifest, each ``--repeats`` times in fresh store objects:

- ``rehash``: read and hash every byte (what ``ares artifacts verify`` does, and the naive reference),
- ``record``: the verification record (a stat per file; the producing stage already recorded its hashes),
- ``record_after_touch``: the record after the weights file's mtime changed (that file is hashed again).

Prints JSON with medians and the ratios against ``rehash``.

    .venv/bin/python benchmarks/bench_verify.py [--mb 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from ares_cli.store.artifacts import ArtifactStore

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = ArtifactStore(root)
        run = store.open_stage("bench", code_version="1", config={"mb": args.mb}, inputs=[], argv=["bench"])
        (run.work_dir / "model").mkdir()
        with open(run.work_dir / "model" / "model.safetensors", "wb") as handle:
            for _ in range(args.mb):
                handle.write(os.urandom(1 << 20))
        for name in ("config.json", "tokenizer.json", "generation_config.json"):
            (run.work_dir / "model" / name).write_text(json.dumps({"name": name}))
        path = run.finalize()
        weights = path / "model" / "model.safetensors"

        rehash = _median_seconds(lambda: ArtifactStore(root).verify(path, rehash=True), args.repeats)
        record = _median_seconds(lambda: ArtifactStore(root).verify(path, rehash=False), args.repeats)

        def touched():
            stat = weights.stat()
            os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
            ArtifactStore(root).verify(path, rehash=False)

        after_touch = _median_seconds(touched, args.repeats)

    print(
        json.dumps(
            {
                "benchmark": "verify_input_artifact",
                "mb": args.mb,
                "repeats": args.repeats,
                "rehash_s": round(rehash, 4),
                "record_s": round(record, 6),
                "record_after_touch_s": round(after_touch, 4),
                "speedup_record_vs_rehash": round(rehash / record, 1),
                "ratio_touch_vs_rehash": round(after_touch / rehash, 3),
                "python": platform.python_version(),
                "machine": platform.machine(),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
