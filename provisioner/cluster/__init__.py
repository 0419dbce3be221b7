"""A cluster once it exists, the same for every backend, in rooms by purpose (bottom up):

- model/      what a cluster is: its state file, its placement, the Cluster handle, the
              command runners, the Slurm client, waits, job-file transports, and the
              provider contract (model/provider.py: the core and every capability);
- services/   what a cluster runs: the daemons' command lines, accounting (MariaDB,
              slurmdbd), slurmrestd, container runtimes, fake GPUs;
- lifecycle/  making, repairing, stopping and scaling it: `up`'s steps;
- faults/     the faults `simcluster fault` injects, one module per kind, and job faults;
- inspect/    reading it: status and the export-logs bundle.

A room imports the rooms above it in this list and provisioner.config, errors, paths,
progress, nodepaths and render; never the providers, named_clusters, the CLI, verify,
testing, check or deploy (tests/unit/test_imports.py checks every floor of the package).
"""
