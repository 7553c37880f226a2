"""Compatibility path (``docs/architecture.md``): the benchmark-specific scores moved to :mod:`ares_cli.scoring.benchmark_scores`; this old path
is that module itself. Project code imports from the new one."""

import sys

from ares_cli.scoring import benchmark_scores

sys.modules[__name__] = benchmark_scores
