"""simcluster for other projects' tests: the objects the pytest plugin's fixtures hand out.

``SlurmCluster`` (handle.py) is what ``slurm_cluster`` returns, ``Job`` (jobs.py) what its
``sbatch`` returns, ``SlurmFaults`` (faults.py) is ``slurm_faults``; pool.py makes and
reuses a session's clusters and owners.py makes sure none outlives its session. The
plugin itself is provisioner/pytest_plugin.py; docs/pytest.md describes it all.

The names below load on first use: the plugin is imported by every pytest run in an
environment with simcluster installed, and must cost nothing there until a test asks.
"""

_NAMES = {"SlurmCluster": "handle", "Job": "jobs", "JobTimeout": "jobs", "SbatchError": "jobs",
          "SlurmFaults": "faults"}


def __getattr__(name):
    if name in _NAMES:
        # lazy: `import provisioner.testing` (the pytest plugin, every session) loads no cluster model
        import importlib
        return getattr(importlib.import_module(f"provisioner.testing.{_NAMES[name]}"), name)
    raise AttributeError(name)


__all__ = list(_NAMES)
