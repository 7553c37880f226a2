"""The artifact store: versioned stage directories, their manifests, integrity checks and row logs."""
