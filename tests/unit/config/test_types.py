"""The spec as stored data (provisioner/config/types.py): round trip, identity, backends."""

from __future__ import annotations

from provisioner.config.types import ClusterSpec
from tests.unit.conftest import spec_from

# -- the spec as stored data ------------------------------------------------------------

def test_spec_round_trips_and_identity_ignores_wait():
    spec = spec_from({"nodes": [{"name": "a", "gpus": [1], "port": 20001}], "controllerPort": 20000,
                      "slurmConf": ["MaxJobCount=5"], "fakeGpus": True, "wait": 10})
    again = ClusterSpec.from_dict(spec.to_dict())
    assert again == spec
    slower = spec_from({"nodes": [{"name": "a", "gpus": [1], "port": 20001}], "controllerPort": 20000,
                        "slurmConf": ["MaxJobCount=5"], "fakeGpus": True, "wait": 99})
    assert slower.identity() == spec.identity()
    assert spec_from({"nodes": 1}).identity() != spec_from({"nodes": 2}).identity()


def test_spec_backends_are_the_registered_providers():
    from provisioner.config.types import BACKENDS, READ_ONLY_BACKENDS
    from provisioner.config.validate import BACKEND_KEYS
    from provisioner.providers import PROVIDERS
    assert set(PROVIDERS) == set(BACKENDS) | set(READ_ONLY_BACKENDS)  # every name the spec knows is registered
    assert all(set(b) <= set(BACKENDS) for b in BACKEND_KEYS.values())
