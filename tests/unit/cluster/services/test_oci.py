"""Slurm's own OCI containers: oci.conf and oci_runtime.sh as rendered (and the script run
with stand-ins for crun and scontrol), the bundle's config.json, bundle input errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from provisioner.cluster.services import oci
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import UsageError
from provisioner.nodepaths import NodePaths
from provisioner.paths import ClusterLayout
from provisioner.render import RenderInputs, render_all, write_files

# Every key Slurm 22.05's oci.conf parser knows (read_oci_conf.c); later releases read these too.
KEYS_22_05 = {"ContainerPath", "CreateEnvFile", "RunTimeCreate", "RunTimeDelete", "RunTimeKill", "RunTimeQuery",
              "RunTimeRun", "RunTimeStart"}


def _render(tmp_path, plugin, note=""):
    spec = ClusterSpec(name="c", backend="local",
                       nodes=tuple(NodeSpec(name=f"node{i}", gpus=(), cpus=2, memory=1024) for i in (1, 2, 3)),
                       partitions=(PartitionSpec(name="main", nodes=("node1", "node2", "node3"), default=True),))
    paths = NodePaths.of_layout(ClusterLayout(tmp_path / "c"))
    inputs = RenderInputs(paths=paths, hostname="h", slurm_user="root", controller_port=6817,
                          node_ports={"node1": 6818, "node2": 6819, "node3": 6820}, containers_plugin=plugin,
                          containers_note=note)
    return paths, render_all(spec, inputs)


def test_oci_files_only_where_a_provider_judged_containers(tmp_path):
    _, files = _render(tmp_path, None)
    assert "oci.conf" not in files and oci.RUNTIME_SCRIPT not in files
    paths, files = _render(tmp_path, "/opt/x/simcluster_pyxis.so")
    settings = dict(re.match(r'(\w+)="(.*)"$', line).groups()
                    for line in files["oci.conf"].splitlines() if line and not line.startswith("#"))
    assert set(settings) == {"RunTimeQuery", "RunTimeKill", "RunTimeDelete", "RunTimeRun"} <= KEYS_22_05
    for key, value in settings.items():
        op = key[len("RunTime"):].lower().replace("query", "state")
        assert value == f"{paths.etc}/{oci.RUNTIME_SCRIPT} {op} %n %b %j.%s.%t.%n"
    assert f'root="{paths.run}/{oci.STATE_DIR}/$node"' in files[oci.RUNTIME_SCRIPT]
    assert f"SLURM_CONF={paths.slurm_conf} scontrol -V" in files[oci.RUNTIME_SCRIPT]


@pytest.fixture
def script(tmp_path):
    """The rendered oci_runtime.sh, with crun and scontrol stand-ins first on PATH: crun
    writes its arguments to crun.args, scontrol -V says the release in $RELEASE."""
    paths, files = _render(tmp_path, "/opt/x/simcluster_pyxis.so")
    write_files(files, Path(paths.etc))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "crun").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/crun.args\n')
    (bin_dir / "scontrol").write_text('#!/bin/sh\necho "$RELEASE"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return Path(paths.etc) / oci.RUNTIME_SCRIPT, bin_dir, Path(paths.run)


def _run(script, bin_dir, *args, release="slurm-wlm 22.05.8", path=None):
    env = {"PATH": path if path is not None else f"{bin_dir}:/usr/bin:/bin", "RELEASE": release}
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True)


def test_crun_state_per_node_in_the_steps_cgroup(script, tmp_path):
    sh, bin_dir, run = script
    for op, expected in (("state", "state 7.0.0.node2"), ("kill", "kill --all 7.0.0.node2"),
                         ("delete", "delete --force 7.0.0.node2")):
        proc = _run(sh, bin_dir, op, "node2", "/b", "7.0.0.node2")
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "crun.args").read_text().split() == \
            ["--root", f"{run}/crun/node2", "--cgroup-manager=disabled", *expected.split()]


def _bundle(tmp_path, env):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"process": {"args": ["hostname"], "env": env}}))
    return bundle


@pytest.mark.skipif(os.geteuid() != 0, reason="the run operation runs root's jobs only")
def test_22_05_gets_each_nodes_rank(script, tmp_path):
    """22.05 writes config.json with the step's variables only; in a batch job those are
    the batch task's (rank 0, node1): the script sets the node's own."""
    sh, bin_dir, _ = script
    bundle = _bundle(tmp_path, ["PATH=/usr/bin", "SLURM_STEP_NODELIST=node[1-3]", "SLURM_PROCID=0",
                                "SLURMD_NODENAME=node1", "SLURM_NODEID=0"])
    proc = _run(sh, bin_dir, "run", "node3", str(bundle), "7.0.0.node3")
    assert proc.returncode == 0, proc.stderr
    env = json.loads((bundle / "config.json").read_text())["process"]["env"]
    assert sorted(env) == sorted(["PATH=/usr/bin", "SLURM_STEP_NODELIST=node[1-3]", "SLURM_PROCID=2",
                                  "SLURMD_NODENAME=node3", "SLURM_NODEID=2", "SLURM_LOCALID=0"])
    assert (tmp_path / "crun.args").read_text().split()[-4:] == ["run", "--bundle", str(bundle), "7.0.0.node3"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the run operation runs root's jobs only")
def test_later_releases_keep_slurms_environment(script, tmp_path):
    sh, bin_dir, _ = script
    env = ["SLURM_STEP_NODELIST=node[1-3]", "SLURM_PROCID=5", "SLURMD_NODENAME=node3"]
    bundle = _bundle(tmp_path, env)
    assert _run(sh, bin_dir, "run", "node3", str(bundle), "x", release="slurm 24.11.1").returncode == 0
    assert json.loads((bundle / "config.json").read_text())["process"]["env"] == env


def test_no_crun_is_one_line(script, tmp_path):
    sh, bin_dir, _ = script
    (bin_dir / "crun").unlink()
    proc = _run(sh, bin_dir, "state", "node1", "/b", "x", path=str(bin_dir))
    assert proc.returncode == 1
    assert proc.stderr == "srun --container: crun is not installed on node node1; " \
                          "`make setup-containers` installs it\n"


def test_config_keeps_the_nodes_name_and_network():
    spec = {"process": {"terminal": True, "args": ["sh"], "env": ["PATH=/bin", "TERM=xterm"], "cwd": "/"},
            "root": {"path": "rootfs", "readonly": True}, "hostname": "crun",
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]}}
    config = oci.adapt_config(spec, ["PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8"])
    assert config["process"]["terminal"] is False
    assert config["process"]["env"] == ["PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8"]
    assert "hostname" not in config and config["root"] == {"path": "rootfs", "readonly": True}
    assert [ns["type"] for ns in config["linux"]["namespaces"]] == ["pid", "ipc", "mount"]
    mounts = {m["destination"]: m for m in config["mounts"]}
    assert mounts["/tmp"]["type"] == "tmpfs" and "/proc" in mounts
    assert mounts["/etc/hosts"] == {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts",
                                    "options": ["rbind", "ro"]}
    assert spec["hostname"] == "crun"  # the input is not changed
    assert oci.adapt_config(spec, [])["process"]["env"] == ["PATH=/bin", "TERM=xterm"]


def test_bundle_input_errors(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        oci.make_bundle(str(tmp_path / "missing.sqsh"), tmp_path / "b")
    (tmp_path / "b").mkdir()
    with pytest.raises(UsageError, match="already exists"):
        oci.make_bundle("dockerd://x", tmp_path / "b")
    with pytest.raises(UsageError, match="does not exist"):
        oci.make_bundle("dockerd://x", tmp_path / "no" / "b")
    with pytest.raises(UsageError, match="only dockerd://IMAGE"):
        oci.make_bundle("docker://x", tmp_path / "c")


def test_containers_left(tmp_path):
    assert oci.containers_left(tmp_path / "none") == {}
    (tmp_path / "node1").mkdir()
    (tmp_path / "node2" / "7.0.0.node2").mkdir(parents=True)
    assert oci.containers_left(tmp_path) == {"node2": ["7.0.0.node2"]}


def test_a_cluster_without_containers_refuses_srun_container_in_one_line(tmp_path):
    """Without oci.conf Slurm would run `srun --container` outside any container, silently:
    where the provider found no container support, the runtime script says why."""
    note = "container options (--container-image, ...): need the local backend run as root (mounts per task)"
    paths, files = _render(tmp_path, None, note)
    assert "plugstack.conf" not in files and "oci.conf" in files
    write_files(files, Path(paths.etc))
    proc = subprocess.run(["sh", str(Path(paths.etc) / oci.RUNTIME_SCRIPT), "run", "node1", "/b", "1.0.0.node1"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == ("srun --container: this cluster runs no containers: container options "
                                   "(--container-image, ...): need the local backend run as root (mounts per task)")
