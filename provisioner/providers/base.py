"""The narrow interface every backend implements (after kind's providers)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Protocol

from provisioner.config.types import ClusterSpec


class Provider(Protocol):
    name: str

    def sanity_checks(self, spec: ClusterSpec) -> None:
        """Raise a PrerequisiteError/UsageError before anything is created."""

    def up(self, spec: ClusterSpec, retain: bool = False) -> str:
        """Create the cluster and wait until every node is ready; return a summary line."""

    def down(self, name: str) -> None:
        """Stop every process of the cluster and remove its state."""

    def status(self, name: str) -> Dict:
        """Nodes, states, GPUs, daemons alive; key 'healthy' says whether all is well."""

    def list_clusters(self) -> List[Dict]:
        """Clusters this backend runs on this machine."""

    def client_env(self, name: str) -> Dict[str, str]:
        """Variables that point Slurm commands at the cluster."""

    def collect_logs(self, name: str, out_dir: Path) -> List[Path]:
        """Write a debug bundle for a bug report into ``out_dir``."""
