"""Line coverage of ares_cli/ by the fast tier (`make test`) against every non-GPU test (both tiers).

    .venv/bin/python tests/coverage_tiers.py build/cov-fast.json build/cov-all.json [--json OUT]

Reads two ``coverage json`` reports (`make coverage-tiers` writes them) and prints each one's total and,
per module, the lines only the slow tier reaches (executed in the combined run, missed by the fast one),
so that what the fast command gives up is named line by line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _ranges(lines: list[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    out, start, prev = [], None, None
    for n in sorted(lines):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if prev > start else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if prev > start else str(start))
    return ", ".join(out)


def compare(fast: dict, every: dict) -> dict:
    """Totals of both reports and the lines executed in ``every`` but not in ``fast``, per file."""
    only_slow = {}
    for name, entry in every["files"].items():
        ran = set(entry["executed_lines"])
        ran_fast = set(fast["files"].get(name, {}).get("executed_lines", []))
        if ran - ran_fast:
            only_slow[name] = sorted(ran - ran_fast)

    def total(report):
        t = report["totals"]
        return {
            "statements": t["num_statements"],
            "missed": t["missing_lines"],
            "percent": t["percent_covered"],
        }

    return {"fast": total(fast), "all": total(every), "only_slow": only_slow}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fast", type=Path, help="coverage json of the fast tier")
    ap.add_argument("every", type=Path, help="coverage json of both tiers combined")
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    args = ap.parse_args(argv)
    result = compare(*(json.loads(p.read_text(encoding="utf-8")) for p in (args.fast, args.every)))
    for tier in ("fast", "all"):
        t = result[tier]
        print(f"{tier}: {t['percent']:.2f} % of {t['statements']:,} statements ({t['missed']:,} missed)")
    lines = sum(len(v) for v in result["only_slow"].values())
    print(f"reached only by the slow tier: {lines} lines in {len(result['only_slow'])} files")
    for name, only in sorted(result["only_slow"].items(), key=lambda kv: -len(kv[1])):
        print(f"  {name}: {len(only)} ({_ranges(only)})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
