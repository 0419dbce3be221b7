"""Fixtures of the fake-GPU tests: a cluster's config directory with fakegpus installed."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from provisioner.cluster.services import fakegpus
from tests.unit.conftest import spec_from


def installed(tmp_path: Path, spec: Dict) -> Path:
    """The config directory (``tmp_path``/etc) of the cluster ``spec``, with fake-gpus.json
    and bin/nvidia-smi as `up` writes them."""
    etc = tmp_path / "etc"
    etc.mkdir()
    fakegpus.install(spec_from(spec), etc)
    return etc


@pytest.fixture
def config_dir(tmp_path) -> Path:
    """A fake-GPU cluster's config directory: node1 with 2 H100s, node2 with 2 untyped GPUs."""
    return installed(tmp_path, {"name": "prod", "fakeGpus": True, "nodes": [
        {"name": "node1", "gpus": [0, 1], "gpuType": "h100"}, {"name": "node2", "gpus": [2, 3]}]})
