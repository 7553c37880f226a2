"""Evaluation scoring: per-problem metrics (Maj@K, Pass@k, Avg@K) and benchmark aggregations.

``__all__`` lists the public modules (each declares its own ``__all__``; ``docs/api.md``).
"""

__all__ = ["benchmark_scores", "metrics"]
