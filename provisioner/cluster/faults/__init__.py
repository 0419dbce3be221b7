"""Faults, one module per kind (like verify's checks, one row each in REGISTRY), and the
job faults of `slurm_faults`/the signals suite (jobfaults.py). Imports cluster.model,
cluster.services and cluster.lifecycle (a heal is a repair)."""
