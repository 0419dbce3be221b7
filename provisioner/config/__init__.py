"""Cluster spec: types, parsing helpers, validation and loading (flags + YAML)."""

from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.config.load import load_spec

__all__ = ["ClusterSpec", "NodeSpec", "PartitionSpec", "load_spec"]
