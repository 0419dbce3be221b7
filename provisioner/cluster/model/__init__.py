"""What a cluster is: state (state.json), placement (where the provider put it), the
Cluster handle, command runners, the Slurm client, polls and waits, job-file transports,
partitions, and the provider contract (provider.py). Imports config, errors, paths,
progress, nodepaths and render only: everything else in the package builds on this."""
