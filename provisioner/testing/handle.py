"""SlurmCluster: what the `slurm_cluster` fixture hands a test, over the shared Cluster.

Everything goes through the cluster's own pieces, so a test cannot tell local from docker:
commands run with the exec prefix and client environment `simcluster exec` uses, jobs are
submitted through the cluster's SlurmClient, job files go in the directory every node sees
(the placement's job root), and logs are the daemons' live log directory where this host
sees it, else the one export-logs bundle.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

from provisioner import named_clusters
from provisioner.cluster.inspect import logs
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.jobfiles import HostDirFiles
from provisioner.cluster.model.slurm import JOB_VARIABLE_PREFIXES, SlurmClient, SlurmError
from provisioner.testing.jobs import Job, SbatchError, wants_own_output


class SlurmCluster:
    """A running cluster for tests: ``name``, ``nodes``, ``env``, ``run``, ``sbatch``, ``logs_dir``."""

    def __init__(self, cluster: Cluster, owned: bool = True):
        self.cluster = cluster
        self.owned = owned  # made by this session (taken down at its end) or attached to
        pl = cluster.placement
        self._files = HostDirFiles(pl.job_root, pl.job_root_in_cluster)
        # The cluster sees this host's paths as they are (every daemon runs here).
        self._same_paths = Path(pl.job_root_in_cluster) == Path(pl.job_root)

    def __repr__(self) -> str:
        return f"SlurmCluster(name={self.name!r}, backend={self.backend!r}, nodes={self.nodes})"

    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def backend(self) -> str:
        return self.cluster.state.backend

    @property
    def spec(self):
        return self.cluster.spec

    @property
    def nodes(self) -> List[str]:
        """The node names, in order (node1, node2, ...)."""
        return self.cluster.node_names

    @property
    def client(self) -> SlurmClient:
        return self.cluster.client

    @property
    def env(self) -> Dict[str, str]:
        """This process's environment pointed at the cluster (SLURM_CONF ...), without the
        variables of any Slurm job pytest itself may run in. Enough to run Slurm commands
        directly where the cluster's commands run on this host (local backend); ``run``
        works on every backend."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLE_PREFIXES)}
        env.update(self.cluster.placement.client_env)
        return env

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """Run a command against the cluster (as `simcluster exec -- ARGV` does): here with
        ``env`` on the local backend, in the controller container on docker. Output is
        captured as text unless the keyword arguments say otherwise; ``env`` adds variables."""
        prefix = self.cluster.runner().exec_prefix(self.cluster.placement.job_root_in_cluster, interactive=False)
        env = self.env
        env.update(kwargs.pop("env", None) or {})
        if not any(k in kwargs for k in ("stdout", "stderr", "capture_output")):
            kwargs["capture_output"] = True
        if not any(k in kwargs for k in ("text", "universal_newlines", "encoding")):
            kwargs["text"] = True
        kwargs.setdefault("timeout", 300)
        return subprocess.run([*prefix, *map(str, argv)], env=env, **kwargs)

    # -- job files ------------------------------------------------------------------------------
    @property
    def jobs_dir(self) -> Path:
        """Where sbatch puts job scripts and outputs, on this host (every node sees it)."""
        return self.cluster.placement.job_root / "pytest"

    def host_path(self, cluster_path: str) -> Optional[Path]:
        """A path as the cluster's jobs see it, on this host; None if this host cannot see it."""
        root = self.cluster.placement.job_root_in_cluster.rstrip("/")
        if cluster_path == root or cluster_path.startswith(root + "/"):
            return self._files.root / cluster_path[len(root):].lstrip("/")
        return Path(cluster_path) if self._same_paths else None

    def _cluster_path(self, host_path: Path) -> Optional[str]:
        """``host_path`` as the jobs see it; None when the cluster cannot see it."""
        host_path = host_path.resolve()
        if host_path == self._files.root or self._files.root in host_path.parents:
            return self._files.cluster_path(host_path)
        return str(host_path) if self._same_paths else None

    def _new_job_dir(self) -> Path:
        self._files.make_dir(self.jobs_dir)
        path = Path(tempfile.mkdtemp(prefix="job-", dir=self.jobs_dir))
        self._files.make_dir(path)  # writable by the jobs, which may run as another user
        return path

    def sbatch(self, script: Union[str, os.PathLike], *sbatch_args: str, wait: bool = True,
               timeout: float = 300.0, env: Optional[Mapping[str, str]] = None) -> Job:
        """Submit ``script`` (a file, or the script's text) with ``sbatch --parsable ARGS``.

        A file the cluster can see is submitted in place, from its own directory; text (or a
        file the cluster cannot see, e.g. on docker) is written to a fresh directory under
        ``jobs_dir`` and submitted from there. Without -o/--output the job's stdout goes to
        ``slurm-<id>.out`` in that directory. With ``wait`` (default) returns once the job
        ended (JobTimeout after ``timeout`` seconds); else at once.
        """
        job_dir = self._new_job_dir()
        as_path = isinstance(script, os.PathLike) or ("\n" not in str(script) and os.path.isfile(str(script)))
        in_cluster = None
        if as_path:
            path = Path(script)
            text = path.read_text()
            in_cluster = self._cluster_path(path)
            name = path.name
        else:
            text = str(script)
            name = "job.sh"
            if not text.startswith("#!"):
                text = "#!/bin/bash\n" + text
        if in_cluster is None:
            target = job_dir / name
            self._files.write_text(target, text, mode=0o755)
            in_cluster = self._files.cluster_path(target)
        args = list(sbatch_args)
        if not wants_own_output(text, args):
            args.insert(0, f"--output={self._files.cluster_path(job_dir)}/slurm-%j.out")
        try:
            job_id = self.client.sbatch(in_cluster, args, env=env)
        except SlurmError as exc:
            raise SbatchError(f"cluster '{self.name}': {exc}") from None
        job = Job(self, int(job_id), job_dir, name)
        job.refresh()
        return job.wait(timeout) if wait else job

    # -- logs ------------------------------------------------------------------------------------
    def export_logs(self, dest: Union[str, os.PathLike]) -> Path:
        """Write the cluster's export-logs bundle into ``dest``; return it."""
        dest = Path(dest)
        logs.export_logs(named_clusters.load(self.name), dest)  # fresh state: faults and pids as they are now
        return dest

    @property
    def logs_dir(self) -> Path:
        """A directory on this host with every daemon's log: the live log directory where
        the daemons write on this host, else a fresh export-logs bundle's logs/."""
        live = self.host_path(self.cluster.paths.log)
        if live is not None and live.is_dir():
            return live
        return self.export_logs(Path(tempfile.mkdtemp(prefix=f"{self.name}-logs-"))) / "logs"
