"""Evaluation scoring: per-problem metrics (Maj@K, Pass@k, Avg@K) and benchmark aggregations."""
