"""The placement is computed once, at provision time, kept in state.json, and loaded from
there without looking at the host; the configs are rendered from its paths (docker: the
containers' own paths, never a host layout)."""

from __future__ import annotations

import builtins
import contextlib
import glob
import json
import os
import pathlib
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from provisioner.cluster.lifecycle.steps import UpRun, write_configs
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.handle import load_placement
from provisioner.cluster.model.placement import Placement
from provisioner.cluster.model.state import STATE_VERSION, ClusterState
from provisioner.paths import ClusterLayout
from provisioner.providers.docker.node_containers import CONTAINER_PATHS
from provisioner.providers.docker.provider import DockerProvider
from provisioner.providers.local import names
from provisioner.providers.local.provider import LocalProvider
from provisioner.render import build_context, render_all
from tests.unit.conftest import spec_from


def _state(root: Path, backend: str, **spec) -> ClusterState:
    s = spec_from({"name": root.name, "nodes": 2, **spec})
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("etc", "log", "run"):
        (root / sub).mkdir(exist_ok=True)
    st = ClusterState(name=s.name, backend=backend, spec=s.to_dict(), root=str(root), hostname="simhost",
                      user="u", controller_port=21000, node_ports={"node1": 21001, "node2": 21002},
                      nss_wrapper_lib="/usr/lib/libnss_wrapper.so")
    if s.accounting:
        st.mariadb_port, st.slurmdbd_port = 21003, 21004
    if backend == "local":  # what LocalProvider.provision records before it places the cluster
        st.provider_data = {"resolver": names.NAMESPACE, "pid_namespace": True, "task_prolog": False,
                            "node_addrs": {"node1": "127.9.0.1", "node2": "127.9.0.2"}}
    else:
        st.controller_port, st.node_ports = 6817, {"node1": 6818, "node2": 6818}
    return st


def _provider(backend: str):
    return LocalProvider() if backend == "local" else DockerProvider()


class HostTouched(AssertionError):
    pass


@contextlib.contextmanager
def no_host_io(monkeypatch):
    """Every way a placement could look at the host raises while the block runs."""
    def refuse(what):
        def fail(*args, **kwargs):
            raise HostTouched(f"{what} called while loading a cluster: {args[:2]}")
        return fail
    with monkeypatch.context() as m:
        m.setattr(builtins, "open", refuse("open"))
        for attr in ("read_text", "read_bytes", "exists", "is_file", "is_dir", "stat", "iterdir"):
            m.setattr(pathlib.Path, attr, refuse(f"Path.{attr}"))
        m.setattr(os, "sched_getaffinity", refuse("os.sched_getaffinity"))
        m.setattr(os, "listdir", refuse("os.listdir"))
        m.setattr(shutil, "which", refuse("shutil.which"))
        m.setattr(glob, "glob", refuse("glob.glob"))
        m.setattr(subprocess, "run", refuse("subprocess.run"))
        m.setattr(subprocess, "Popen", refuse("subprocess.Popen"))
        for fn in ("hosts_file", "openmpi_params", "pid_init", "foreign_openmpi"):
            m.setattr(names, fn, refuse(f"names.{fn}"))
        yield


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_placement_round_trips_through_state_json(tmp_path, backend):
    st = _state(tmp_path / f"c-{backend}", backend, accounting=True)
    provider = _provider(backend)
    placed = provider.placement(st)
    st.placement = placed.to_dict()
    st.save()
    raw = json.loads(st.layout.state_file.read_text())
    assert raw["version"] == STATE_VERSION and raw["placement"]["render"]["paths"]["etc"] == placed.paths.etc
    loaded = ClusterState.load(ClusterLayout(Path(st.root)))
    assert loaded is not None
    assert Placement.from_dict(loaded.placement) == placed
    assert Cluster(loaded, provider).placement == placed
    assert render_all(loaded.cluster_spec, Cluster(loaded, provider).placement.render) == \
        render_all(st.cluster_spec, placed.render)


def test_local_placement_records_what_it_read_from_the_host(tmp_path):
    st = _state(tmp_path / "c", "local")
    pl = LocalProvider().placement(st)
    assert pl.render.host_cpus == len(os.sched_getaffinity(0))
    assert "127.9.0.1 node1" in pl.extra_files["hosts"]  # the cluster's hosts file, its text fixed here
    assert pl.render.nss_wrapper_lib is None  # names resolve in the node's mount namespace
    tini = names.pid_init()
    # tini as pid 1, or the node starter as its own (--init) where it is built
    assert pl.slurmd_forks == bool(tini) and ((tini in pl.slurmd_prefix or "--init" in pl.slurmd_prefix)
                                              if tini else True)
    assert pl.render.task_prolog == (tini is None)  # the recorded choice (False) holds where tini runs
    if not pl.render.task_prolog:
        assert "task_prolog.sh" not in render_all(st.cluster_spec, pl.render)


def test_loading_a_cluster_does_no_host_io(tmp_path, monkeypatch):
    st = _state(tmp_path / "c", "local")
    provider = LocalProvider()
    st.placement = provider.placement(st).to_dict()
    st.save()
    loaded = ClusterState.load(ClusterLayout(Path(st.root)))
    with no_host_io(monkeypatch):
        cluster = Cluster(loaded, provider)
        assert cluster.paths.slurm_conf == f"{st.root}/etc/slurm.conf"
        assert cluster.placement.render.host_cpus and cluster.placement.extra_files["hosts"]
        assert cluster.placement.slurmd_pid is None or callable(cluster.placement.slurmd_pid)


def test_the_guard_catches_the_legacy_path_that_reads_the_host(tmp_path, monkeypatch):
    """A state file from before stored placements (version 1) still loads: the provider
    computes the placement once, from the host, and the state keeps it for its next save."""
    st = _state(tmp_path / "c", "local")
    st.save()
    raw = json.loads(st.layout.state_file.read_text())
    del raw["placement"]
    raw["version"] = 1
    st.layout.state_file.write_text(json.dumps(raw))
    old = ClusterState.load(ClusterLayout(Path(st.root)))
    assert old is not None and old.placement is None
    provider = LocalProvider()
    with no_host_io(monkeypatch), pytest.raises(HostTouched):
        Cluster(old, provider)
    cluster = Cluster(old, provider)
    assert old.placement == cluster.placement.to_dict()
    calls = []
    monkeypatch.setattr(LocalProvider, "placement", lambda self, state: calls.append(state) or None)
    assert load_placement(old, provider) == cluster.placement and calls == []


def test_docker_renders_with_the_containers_paths_only(tmp_path):
    st = _state(tmp_path / "c", "docker", fakeGpus=2, accounting=True)
    pl = DockerProvider().placement(st)
    assert pl.paths == CONTAINER_PATHS
    files = render_all(st.cluster_spec, pl.render)
    # No TaskProlog; a state made without container options: oci files that refuse --container.
    assert set(files) == {"slurm.conf", "gres.conf", "cgroup.conf", "slurmdbd.conf", "oci.conf", "oci_runtime.sh"}
    assert "this cluster runs no containers" in files["oci_runtime.sh"] and "plugstack.conf" not in files
    for name, text in files.items():
        assert "/nonexistent" not in text and str(tmp_path) not in text, name
    conf = files["slurm.conf"]
    assert "StateSaveLocation=/var/spool/slurmctld" in conf and "SlurmdLogFile=/var/log/slurm/slurmd-%n.log" in conf
    assert "AuthInfo" not in conf  # munge's default socket
    assert "File=/dev/nvidia0" in files["gres.conf"]
    ctx = build_context(st.cluster_spec, pl.render)
    assert ctx["state_dir"] == "/shared" and ctx["tmp_fs"] == "" and ctx["task_prolog"] == ""
    assert ctx["accounting"]["dbd_host"] == "slurmctld" and ctx["accounting"]["dbd_port"] == 21004


def test_write_configs_reads_the_placement_and_keeps_the_password_out_of_the_state(tmp_path):
    st = _state(tmp_path / "c", "local", accounting=True)
    provider = LocalProvider()
    st.placement = provider.placement(st).to_dict()
    cluster = Cluster(st, provider)
    before = cluster.placement.to_dict()
    up = UpRun(cluster, progress=lambda line: None, timeout=1.0, db_password="pw-only-in-slurmdbd")
    write_configs(up)
    assert cluster.placement.to_dict() == before
    etc = Path(st.root) / "etc"
    assert "StoragePass=pw-only-in-slurmdbd" in (etc / "slurmdbd.conf").read_text()
    assert (etc / "hosts").read_text() == cluster.placement.extra_files["hosts"]
    assert ("task_prolog.sh" in os.listdir(etc)) == cluster.placement.render.task_prolog
    st.save()
    assert "pw-only-in-slurmdbd" not in st.layout.state_file.read_text()
    with pytest.raises(Exception):  # frozen: nobody changes a placement after it was stored
        cluster.placement.render.accounting = None  # type: ignore[misc]
    assert replace(cluster.placement.render, host_cpus=1).host_cpus == 1
