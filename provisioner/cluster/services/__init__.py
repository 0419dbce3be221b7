"""What a cluster runs beside slurmctld and slurmd: the daemons' command lines and start
(daemons.py), accounting (MariaDB + slurmdbd), slurmrestd, container runtimes (oci,
containers) and fake GPUs. Imports cluster.model (and what it may import)."""
