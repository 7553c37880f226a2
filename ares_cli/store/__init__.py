"""The artifact store: versioned stage directories, their manifests, integrity checks and row logs.

``__all__`` lists the public modules (each declares its own ``__all__``; ``docs/api.md``).
"""

__all__ = ["artifacts", "hashing", "integrity", "provenance", "rowlog", "stage_run"]
