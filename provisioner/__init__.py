"""simcluster: a real multi-node Slurm cluster on one machine."""

__version__ = "0.1.0"
