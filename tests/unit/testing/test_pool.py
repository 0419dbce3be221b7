"""The pytest plugin's pool (provisioner/testing/pool.py): a request as a spec, its
description, and the bookkeeping of which clusters a session made. No cluster is made:
``make``, the provider and ``down`` are replaced where a test reaches them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provisioner.config.overrides import spec_overrides
from provisioner.errors import ClusterNotFound, SimclusterError
from provisioner.testing import owners
from provisioner.testing.pool import (REQUEST_KEYS, BadRequest, CannotRun, ClusterPool, build_spec, describe,
                                      gpu_choices)


# -- gpus= ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (None, {}), ("", {}), ("none", {}),
    ("6,7", {"gpus": "6,7"}),
    (" 0-3 ", {"gpus": "0-3"}),
    ("fake:2", {"fakeGpus": 2}),
    ("fake:6,7", {"gpus": "6,7", "fakeGpus": True}),
])
def test_gpus_as_spec_keys(value, expected):
    assert spec_overrides(**gpu_choices(value)) == expected


def test_gpu_choices_are_ups_flags():
    assert gpu_choices("fake:3") == {"fake_gpus": 3}
    assert gpu_choices("fake:1,2") == {"gpus": "1,2", "fake_gpus": True}


# -- describe -------------------------------------------------------------------------------

def test_describe_an_empty_request_gives_the_defaults():
    assert describe({}) == "2 nodes, local"


def test_describe_names_what_was_asked_sorted_and_leaves_out_what_was_not():
    text = describe({"nodes": 3, "backend": "docker", "gpus": "fake:2", "accounting": True,
                     "fast_failure": False, "slurm": None})
    assert text == "3 nodes, docker, accounting True, gpus fake:2"


# -- build_spec -----------------------------------------------------------------------------

def test_build_spec_from_a_request():
    spec = build_spec("pyt-abc-1", {"nodes": 3, "gpus": "fake:3", "cpus": 1, "memory": "256",
                                    "fast_failure": True})
    assert spec.name == "pyt-abc-1" and spec.backend == "local"
    assert [n.gpus for n in spec.nodes] == [(0,), (1,), (2,)] and spec.fake_gpus
    assert spec.failure_detection == "fast" and not spec.accounting


def test_build_spec_takes_counts_as_text():
    # command-line options and ini values arrive as text
    spec = build_spec("pyt-abc-2", {"nodes": "3", "cpus": "1", "memory": "256"})
    assert len(spec.nodes) == 3 and spec.nodes[0].cpus == 1


def test_build_spec_accounting_false_keeps_the_config_files_value(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("apiVersion: simcluster/v1\nkind: Cluster\nnodes: 1\ncpus: 1\nmemory: 256\naccounting: true\n")
    spec = build_spec("pyt-abc-3", {"config": str(path), "accounting": False, "nodes": 2})
    assert spec.accounting and len(spec.nodes) == 2 and spec.name == "pyt-abc-3"


def test_build_spec_slurm_version_as_a_number():
    spec = build_spec("pyt-abc-4", {"backend": "docker", "slurm": 24.11, "cpus": 1, "memory": "256"})
    assert spec.slurm == "24.11"


def test_build_spec_refuses_unknown_keys_naming_the_allowed_ones():
    with pytest.raises(BadRequest) as exc:
        build_spec("pyt-abc-5", {"node": 2, "gpu": "0"})
    assert "unknown slurm marker key(s) gpu, node" in str(exc.value)
    assert all(k in str(exc.value) for k in REQUEST_KEYS)


def test_build_spec_invalid_spec_is_a_bad_request_naming_the_request():
    with pytest.raises(BadRequest, match=r"^simcluster cannot make a cluster of 0 nodes, local, cpus 1: .*nodes"):
        build_spec("pyt-abc-6", {"nodes": 0, "cpus": 1})


def test_build_spec_fake_gpu_count_zero_is_the_specs_validation_error():
    with pytest.raises(BadRequest, match="fakeGpus"):
        build_spec("pyt-abc-7", {"gpus": "fake:0"})


# -- the pool's bookkeeping -----------------------------------------------------------------

def test_key_ignores_unset_choices_and_order():
    a = ClusterPool.key({"nodes": 2, "accounting": False, "gpus": None, "backend": ""})
    b = ClusterPool.key({"nodes": "2"})
    assert a == b == (("nodes", "2"),)
    assert ClusterPool.key({"nodes": 2, "backend": "docker"}) == ClusterPool.key({"backend": "docker", "nodes": 2})
    assert ClusterPool.key({"nodes": 2}) != ClusterPool.key({"nodes": 3})


def test_new_names_are_numbered_under_the_sessions_token():
    pool = ClusterPool()
    first, second = pool.new_name(), pool.new_name()
    assert first == f"{owners.PREFIX}{pool.token}-1" and second == f"{owners.PREFIX}{pool.token}-2"
    assert len(pool.token) == 6


def test_shared_makes_one_cluster_per_request(monkeypatch):
    pool = ClusterPool()
    made = []
    monkeypatch.setattr(pool, "make", lambda req: made.append(req) or SimpleNamespace(name=f"c{len(made)}"))
    a = pool.shared({"nodes": 2})
    assert pool.shared({"nodes": "2", "accounting": False}) is a
    b = pool.shared({"nodes": 3})
    assert b is not a and len(made) == 2


def test_shared_reports_a_failed_up_once_per_request(monkeypatch):
    pool = ClusterPool()
    calls = []

    def make(req):
        calls.append(req)
        raise BadRequest("simcluster up of a cluster of 2 nodes, local failed: boom")

    monkeypatch.setattr(pool, "make", make)
    with pytest.raises(BadRequest, match="boom$"):
        pool.shared({"nodes": 2})
    with pytest.raises(BadRequest, match=r"boom \(earlier in this session\)"):
        pool.shared({"nodes": 2})
    assert len(calls) == 1


class RefusingProvider:
    def __init__(self):
        self.checked = 0

    def sanity_checks(self, spec):
        self.checked += 1
        raise SimclusterError("no slurmctld on PATH")


def test_make_on_a_machine_that_cannot_skips_once_and_records_no_owner(monkeypatch, home):
    import provisioner.providers
    provider = RefusingProvider()
    monkeypatch.setattr(provisioner.providers, "provider_named", lambda backend: provider)
    pool = ClusterPool()
    with pytest.raises(CannotRun, match="^this machine cannot run a simcluster cluster of 2 nodes, local, cpus 1: "
                                        "no slurmctld on PATH$"):
        pool.make({"cpus": 1})
    with pytest.raises(CannotRun, match="no slurmctld"):
        pool.make({"cpus": 1})
    assert provider.checked == 1
    assert pool.owned == [] and owners.orphaned() == []
    assert not owners.registry_dir().exists() or not list(owners.registry_dir().iterdir())


def test_release_takes_down_owned_clusters_only(monkeypatch, home):
    from provisioner import named_clusters
    downs = []
    monkeypatch.setattr(named_clusters, "down", lambda name: downs.append(name) or f"cluster '{name}' removed")
    lines = []
    pool = ClusterPool(progress=lines.append)
    mine, other = SimpleNamespace(name="pyt-x-1"), SimpleNamespace(name="pyt-x-2")
    owners.record(mine.name)
    pool.owned.append(mine)
    pool._shared[("nodes", "2")] = mine
    pool.release(other)
    pool.release(mine)
    assert downs == ["pyt-x-1"] and lines == ["cluster 'pyt-x-1' removed"]
    assert pool.owned == [] and pool._shared == {}
    assert not (owners.registry_dir() / "pyt-x-1.json").exists()


def test_release_with_keep_leaves_the_cluster_and_reports_it(monkeypatch, home):
    from provisioner import named_clusters
    monkeypatch.setattr(named_clusters, "down", lambda name: pytest.fail("keep must not take clusters down"))
    pool = ClusterPool(keep=True)
    handle = SimpleNamespace(name="pyt-x-3")
    owners.record(handle.name)
    pool.owned.append(handle)
    pool.release(handle)
    assert pool.kept == ["pyt-x-3"] and pool.owned == []
    assert owners.orphaned() == []  # no longer owned: a later session must not sweep it


def test_release_of_a_cluster_already_gone_still_forgets_it(monkeypatch, home):
    from provisioner import named_clusters

    def down(name):
        raise ClusterNotFound(name)

    monkeypatch.setattr(named_clusters, "down", down)
    pool = ClusterPool()
    handle = SimpleNamespace(name="pyt-x-4")
    owners.record(handle.name)
    pool.owned.append(handle)
    pool.release(handle)
    assert not (owners.registry_dir() / "pyt-x-4.json").exists()


def test_close_takes_down_every_cluster_and_returns_the_errors(monkeypatch, home):
    from provisioner import named_clusters
    downs = []

    def down(name):
        downs.append(name)
        if name == "pyt-x-5":
            raise RuntimeError("stuck")
        return f"cluster '{name}' removed"

    monkeypatch.setattr(named_clusters, "down", down)
    pool = ClusterPool()
    pool.owned += [SimpleNamespace(name="pyt-x-5"), SimpleNamespace(name="pyt-x-6")]
    errors = pool.close()
    assert downs == ["pyt-x-5", "pyt-x-6"]
    assert errors == ["pyt-x-5: stuck"]
