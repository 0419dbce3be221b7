"""A cluster's life: `up`'s ordered steps (steps.py), create / repair in place / stop
(create.py), repair (repair.py) and `simcluster scale` (scale.py). Imports
cluster.model and cluster.services."""
