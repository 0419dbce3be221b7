"""Job-file transports: where job scripts are written and their output read.

Verify's checks, `exec` and the pytest plugin name files by paths under a directory on
this host; a transport writes and reads them wherever the cluster keeps them, and says
what path the jobs see. HostDirFiles serves clusters whose job directory is on this host
(local: the state directory; docker: the shared directory mounted in every container).
Deployed clusters without a shared filesystem use the SSH transport
(provisioner/providers/ssh/files.py). A provider hands out its transport
(Provider.job_files).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Optional


class JobError(Exception):
    """A job could not be submitted, or did not finish as it should; carries its output file.
    A transport raises it (a subclass) when it cannot put a job's files on the cluster, so a
    check fails with that line (also importable as provisioner.verify.jobs.JobError)."""

    def __init__(self, message: str, output: Optional[Path] = None):
        super().__init__(message)
        self.output = output


class JobFiles:
    """The interface. ``root`` is the directory that run directories go in: on this host
    where ``on_this_host`` (else the same path on the cluster's hosts)."""

    root: Path
    on_this_host = False

    def cluster_path(self, path: Path) -> str:
        """``path`` (under root) as the cluster's jobs see it."""
        raise NotImplementedError

    def make_dir(self, path: Path) -> None:
        """Create ``path`` (and parents), writable by the jobs (they may run as another user)."""
        raise NotImplementedError

    def write_text(self, path: Path, text: str, mode: int = 0o644) -> None:
        raise NotImplementedError

    def read_text(self, path: Path) -> Optional[str]:
        """A job file's text, None when it does not exist (yet)."""
        raise NotImplementedError

    def copy_tree(self, src: Path, dest: Path) -> None:
        """Copy a directory of this host (the workloads) to ``dest`` for the jobs."""
        raise NotImplementedError

    def exists(self, path: Path) -> bool:
        return self.read_text(path) is not None

    def new_run_dir(self) -> Path:
        """<root>/verify/<YYYYmmdd-HHMMSS>[-N]: one directory per verify run."""
        base = self.root / "verify" / time.strftime("%Y%m%d-%H%M%S")
        path, n = base, 1
        while self.exists_dir(path):
            n += 1
            path = base.with_name(f"{base.name}-{n}")
        self.make_dir(path)
        return path

    def exists_dir(self, path: Path) -> bool:
        raise NotImplementedError


class HostDirFiles(JobFiles):
    """Job files in a directory of this host that the cluster sees (maybe at another path)."""

    on_this_host = True

    def __init__(self, root: Path, root_in_cluster: str):
        self.root = Path(root)
        self.root_in_cluster = root_in_cluster

    def cluster_path(self, path: Path) -> str:
        rel = Path(path).relative_to(self.root)
        return self.root_in_cluster if str(rel) == "." else f"{self.root_in_cluster}/{rel.as_posix()}"

    def make_dir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o777)

    def exists_dir(self, path: Path) -> bool:
        return path.is_dir()

    def write_text(self, path: Path, text: str, mode: int = 0o644) -> None:
        path.write_text(text)
        path.chmod(mode)

    def read_text(self, path: Path) -> Optional[str]:
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return None

    def copy_tree(self, src: Path, dest: Path) -> None:
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
