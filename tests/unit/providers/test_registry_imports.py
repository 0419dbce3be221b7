"""The provider registry where a backend's library cannot be imported."""

from __future__ import annotations

import pytest

import provisioner.providers as registry


def test_a_backend_that_cannot_be_imported_is_skipped_by_lookups_only(monkeypatch):
    real = registry.provider_class

    def broken(name):
        if name == "docker":
            raise ModuleNotFoundError("No module named 'docker.errors'")
        return real(name)

    monkeypatch.setattr(registry, "provider_class", broken)
    monkeypatch.setattr(registry, "_instances", {})
    # Finding clusters (status, export-logs, list) skips it: a machine without the Docker
    # SDK (or with another package named docker) has no docker clusters.
    assert [p.name for p in registry.registered_providers(available_only=True)] == ["local"]
    with pytest.raises(ImportError):  # asked for all of them, the problem is not hidden
        registry.registered_providers()
