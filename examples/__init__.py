"""Examples that run against pdsim (importable as ``examples.*`` from the repository root)."""
