"""Verify's job files on a deployed cluster whose hosts share no filesystem.

Paths name the same directory on every host (under RUN_ROOT, in /tmp). What verify
writes goes where the jobs need it:
  - job scripts: to the controller (SFTP), where sbatch reads them; sbatch sends the
    script's text to the job's node itself;
  - directories (a job's --chdir and --output) and the workloads tree: to the controller
    and to every compute node, with one srun task per node (`--input=all` gives each the
    same tar on stdin), since any of them may run the job.
A job's output is written on the node that ran it, so a file is read from the controller
(SFTP) when it is there, else from whichever node has it, with one srun task per node.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path
from typing import List, Optional, Tuple

from provisioner.cluster.model.jobfiles import JobError, JobFiles
from provisioner.cluster.model.slurm import SlurmClient
from provisioner.config.types import ClusterSpec
from provisioner.errors import SimclusterError
from provisioner.providers.ssh.cluster import node_groups, srun_on_nodes

RUN_ROOT = Path("/tmp/simcluster-verify")
_FOUND = "SIMCLUSTER_FILE "


class JobFilesError(SimclusterError, JobError):
    """A job directory or file could not be put on the hosts: a check FAILs with this line
    (JobError), and before any check runs it is the command's one-line error."""


def _tar_gz(src: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(src.rglob("*")):
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            tar.add(path, arcname=path.relative_to(src).as_posix(), recursive=False)
    return buf.getvalue()


class SSHJobFiles(JobFiles):
    """Job files on the controller and every compute node of ``spec``, through ``client``."""

    # An srun to the nodes is a job of its own: it waits for room on nodes that other checks'
    # jobs fill, minutes where jobs are slow (VMs without KVM), not only its own run time.
    def __init__(self, client: SlurmClient, spec: ClusterSpec, root: Path = RUN_ROOT, timeout: float = 300.0):
        self.client = client
        self.root = Path(root)
        self.timeout = timeout
        self.groups: List[Tuple[Optional[str], List[str]]] = node_groups(spec)

    def cluster_path(self, path: Path) -> str:
        return Path(path).as_posix()  # the same path on every host

    # -- writing ----------------------------------------------------------------------------
    def _everywhere(self, what: str, script: str, args: List[str], stdin: Optional[str] = None) -> None:
        """Run ``sh -c script sh args...`` on the controller and on one task per compute node."""
        argv = ["sh", "-c", script, "sh", *args]
        res = self.client.run(argv, stdin=stdin, timeout=self.timeout)
        if not res.ok:
            raise JobFilesError(f"{what} on {self.client.runner.where} failed: {res.error_line()}")
        for part, nodes in self.groups:
            res = srun_on_nodes(self.client, part, nodes, argv, stdin=stdin, timeout=self.timeout)
            if not res.ok:
                raise JobFilesError(f"{what} on nodes {','.join(nodes)} failed: {res.error_line()}")

    def make_dir(self, path: Path) -> None:
        # 0777: jobs may run as another user than the one verify logs in as.
        self._everywhere(f"mkdir {path}", 'mkdir -p "$1" && chmod 777 "$1"', [self.cluster_path(path)])

    def exists_dir(self, path: Path) -> bool:
        return self.client.runner.run(["test", "-d", self.cluster_path(path)], timeout=15).ok

    def write_text(self, path: Path, text: str, mode: int = 0o644) -> None:
        self.client.runner.write_file(self.cluster_path(path), text.encode(), mode)

    def copy_tree(self, src: Path, dest: Path) -> None:
        payload = base64.b64encode(_tar_gz(Path(src))).decode() + "\n"
        self._everywhere(f"copying {src.name}/ to {dest}", 'mkdir -p "$1" && base64 -d | tar xzf - -C "$1"',
                         [self.cluster_path(dest)], stdin=payload)

    # -- reading ----------------------------------------------------------------------------
    def read_text(self, path: Path) -> Optional[str]:
        where = self.cluster_path(path)
        data = self.client.runner.read_file(where)
        if data is not None:
            return data.decode(errors="replace")
        # One line per node that has the file: the prefix, then the file as base64.
        script = f'if [ -f "$1" ]; then printf "{_FOUND}"; base64 -w0 "$1"; echo; fi'
        found: List[bytes] = []
        for part, nodes in self.groups:
            res = srun_on_nodes(self.client, part, nodes, ["sh", "-c", script, "sh", where], timeout=self.timeout)
            for line in res.stdout.splitlines():
                if line.startswith(_FOUND):
                    try:
                        found.append(base64.b64decode(line[len(_FOUND):].strip()))
                    except ValueError:
                        continue
        # Several nodes have it when a job ran there twice (requeued, output appended): the longest.
        return max(found, key=len).decode(errors="replace") if found else None
