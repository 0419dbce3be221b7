"""accounting: true in the spec, the rendered slurm.conf/slurmdbd.conf, and the state file.

No daemon is started here; tests/integration/test_accounting.py runs the real database.
"""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from provisioner.cluster.model.state import ClusterState, reserved_ports
from provisioner.config.types import ClusterSpec
from provisioner.errors import ConfigError
from provisioner.paths import ClusterLayout
from provisioner.render import AccountingInputs, redact_secrets, render_all, write_files
from tests.unit.conftest import fixed_inputs, spec_from


def settings(text: str) -> dict:
    """Key=Value lines of a rendered config (comments and blanks skipped)."""
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_accounting_is_off_by_default_and_a_plain_bool():
    assert spec_from({}).accounting is False
    assert spec_from({"accounting": True}).accounting is True
    with pytest.raises(ConfigError) as err:
        spec_from({"accounting": "yes"})
    assert "accounting: expected true or false" in str(err.value)


def test_docker_accounting_configs_point_at_the_controller_container(tmp_path):
    """On docker, slurmdbd and MariaDB run in the controller container (hostname slurmctld):
    slurm.conf sends accounting there; slurmdbd.conf (0600) names it as its own host."""
    from provisioner.cluster.model.handle import Cluster
    from provisioner.cluster.lifecycle.steps import UpRun, write_configs
    from provisioner.providers.docker.node_containers import CONTROLLER_HOST
    from provisioner.providers.docker.provider import DockerProvider

    spec = spec_from({"accounting": True, "backend": "docker", "nodes": 2})
    layout = ClusterLayout(tmp_path / "c")
    layout.etc.mkdir(parents=True)
    state = ClusterState(name=spec.name, backend="docker", spec=spec.to_dict(), root=str(layout.root), hostname="h",
                         user="root", controller_port=6817, node_ports={n.name: 6818 for n in spec.nodes},
                         mariadb_port=3306, slurmdbd_port=6819)
    # The configs step as `up` runs it (no container is touched: runners are made lazily).
    write_configs(UpRun(Cluster(state, DockerProvider()), progress=lambda _: None, timeout=10))
    conf = settings((layout.etc / "slurm.conf").read_text())
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStorageHost"] == CONTROLLER_HOST and conf["AccountingStoragePort"] == "6819"
    assert "AccountingStoragePass" not in conf  # containers use munge's default socket
    dbd_path = layout.etc / "slurmdbd.conf"
    dbd = settings(dbd_path.read_text())
    assert dbd["DbdHost"] == CONTROLLER_HOST and dbd["StorageHost"] == "127.0.0.1"
    assert dbd["StoragePort"] == "3306" and dbd["SlurmUser"] == "root" and "AuthInfo" not in dbd
    assert len(dbd["StoragePass"]) == 32 and dbd["StoragePass"] != "change-me"
    assert stat.S_IMODE(dbd_path.stat().st_mode) == 0o600
    assert "User - 'root'" in (layout.etc / "accounts.cfg").read_text()
    assert not (layout.etc / "task_prolog.sh").exists()  # each container sees only its own GPUs


def test_accounting_is_part_of_the_identity_and_old_specs_load():
    on, off = spec_from({"accounting": True}), spec_from({})
    assert on.identity() != off.identity()
    old = off.to_dict()
    del old["accounting"]  # a state file written before accounting existed
    assert ClusterSpec.from_dict(old) == off
    assert ClusterSpec.from_dict(on.to_dict()) == on


def test_without_accounting_slurm_conf_keeps_accounting_off():
    files = render_all(spec_from({}), fixed_inputs(spec_from({})))
    assert "slurmdbd.conf" not in files
    conf = settings(files["slurm.conf"])
    assert conf["AccountingStorageType"] == "accounting_storage/none"
    assert conf["JobAcctGatherType"] == "jobacct_gather/none"
    assert not any(k.startswith("Priority") for k in conf)


def test_with_accounting_slurm_conf_points_at_slurmdbd():
    spec = spec_from({"accounting": True})
    inputs = fixed_inputs(spec, root="/state/acct")
    inputs = replace(inputs, accounting=AccountingInputs(dbd_port=24001, storage_port=24000, storage_pass="s3cret"))
    files = render_all(spec, inputs)
    conf = settings(files["slurm.conf"])
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStorageHost"] == "127.0.0.1" and conf["AccountingStoragePort"] == "24001"
    # Clients reach slurmdbd through the cluster's own munged, not the system's.
    assert conf["AccountingStoragePass"] == "/state/acct/munge/munge.socket"
    assert conf["JobAcctGatherType"] == "jobacct_gather/linux"
    assert conf["PriorityType"] == "priority/multifactor" and int(conf["PriorityWeightFairshare"]) > 0
    dbd = settings(files["slurmdbd.conf"])
    assert dbd["DbdPort"] == "24001" and dbd["DbdAddr"] == "127.0.0.1" and dbd["DbdHost"] == "localhost"
    assert dbd["StorageType"] == "accounting_storage/mysql"
    assert (dbd["StorageHost"], dbd["StoragePort"], dbd["StoragePass"]) == ("127.0.0.1", "24000", "s3cret")
    assert dbd["AuthInfo"] == "socket=/state/acct/munge/munge.socket"
    assert dbd["SlurmUser"] == "slurm"
    assert dbd["LogFile"] == "/state/acct/log/slurmdbd.log" and dbd["PidFile"] == "/state/acct/run/slurmdbd.pid"


def test_render_without_a_cluster_uses_default_ports_that_do_not_collide():
    one = spec_from({"accounting": True, "nodes": 1})
    dbd = settings(render_all(one, fixed_inputs(one))["slurmdbd.conf"])
    assert (dbd["DbdPort"], dbd["StoragePort"]) == ("6819", "3306")  # Slurm's and MySQL's defaults
    two = spec_from({"accounting": True, "nodes": 2})  # node2 gets 6818 + 1 = 6819
    files = render_all(two, fixed_inputs(two))
    assert settings(files["slurmdbd.conf"])["DbdPort"] == "6820"
    assert settings(files["slurm.conf"])["AccountingStoragePort"] == "6820"


def test_slurmdbd_conf_is_written_mode_0600(tmp_path):
    spec = spec_from({"accounting": True})
    (tmp_path / "slurmdbd.conf").write_text("old")
    (tmp_path / "slurmdbd.conf").chmod(0o644)  # even over a readable leftover
    write_files(render_all(spec, fixed_inputs(spec)), tmp_path)
    assert stat.S_IMODE((tmp_path / "slurmdbd.conf").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "slurm.conf").stat().st_mode) & 0o044  # the others stay readable


def test_redact_secrets_hides_only_the_password():
    text = "StorageUser=slurm\nStoragePass=abc123\nStoragePort=3306\n"
    assert redact_secrets(text) == "StorageUser=slurm\nStoragePass=<redacted>\nStoragePort=3306\n"


def _state(root: Path, name: str, **kw) -> ClusterState:
    return ClusterState(name=name, backend="local", spec=spec_from({"name": name}).to_dict(), root=str(root),
                        hostname="h", user="u", controller_port=kw.pop("controller_port", 21000),
                        node_ports={"node1": 21001}, **kw)


def test_state_records_accounting_ports_and_old_files_still_load(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path))
    a = _state(tmp_path / "a", "a", mariadb_port=21002, slurmdbd_port=21003)
    (tmp_path / "a").mkdir()
    a.save()
    assert {21002, 21003} <= set(reserved_ports(exclude="b"))
    # A state file from before accounting: no mariadb_port/slurmdbd_port keys.
    (tmp_path / "old").mkdir()
    old = _state(tmp_path / "old", "old", controller_port=22000)
    old.save()
    data = json.loads(old.layout.state_file.read_text())
    del data["mariadb_port"], data["slurmdbd_port"]
    old.layout.state_file.write_text(json.dumps(data))
    loaded = ClusterState.load(ClusterLayout(tmp_path / "old"))
    assert loaded is not None and loaded.mariadb_port is None and loaded.slurmdbd_port is None
