"""A deployed cluster with accounting and REST (ansible/roles/slurm_accounting, slurm_rest),
read over a scripted controller: the spec says both, liveness comes from the roles' units
(systemd hosts) or pid files, the ports from slurm.conf and slurmdbd.conf (or MariaDB's unit
where a sudoer cannot read it), slurmrestd's URL from the role's file."""

from __future__ import annotations

import os

from provisioner.cluster.inspect.status import cluster_status
from provisioner.cluster.model.command_runner import HostRunner
from provisioner.cluster.model.handle import Cluster
from provisioner.providers.ssh.accounting import pids_alive, storage_port
from provisioner.providers.ssh.provider import SSHProvider
from tests.unit.providers.ssh.controller import CONFIG, Controller

DBD_CONF = b"DbdHost=ctl\nDbdPort=6819\nStorageHost=127.0.0.1\nStoragePort=3307\nStoragePass=s3cret\n"


class AccountingController(Controller):
    """The roles' controller with MariaDB dead: slurmdbd and slurmrestd answer by their pid files."""

    def __init__(self, **kw):
        super().__init__(files={"/etc/slurm/slurmdbd.conf": DBD_CONF,
                                "/etc/slurm/slurmrestd.url": b"http://10.0.0.10:6820\n"}, **kw)

    def _answer(self, argv):
        if argv[0] == "sh" and "/proc/" in argv[-1]:
            return "slurmdbd=1 mariadbd=0 slurmrestd=1\n"
        if tuple(argv) == ("scontrol", "show", "config"):
            return CONFIG + ("AccountingStorageType   = accounting_storage/slurmdbd\n"
                             "AccountingStoragePort   = 6819\nAuthAltTypes            = auth/jwt\n")
        if argv[0] == "sacctmgr":
            return "dt1|6817\n"
        return super()._answer(argv)


def test_accounting_and_rest_are_read_from_the_controller():
    ctl = AccountingController()
    provider = SSHProvider(ctl, "root@ctl")
    cluster = Cluster(provider.discover(""), provider)
    assert cluster.spec.accounting and cluster.spec.rest
    assert cluster.state.rest_url == "http://10.0.0.10:6820"
    assert (cluster.placement.dbd_port, cluster.placement.storage_port) == (6819, 3307)
    alive = provider.daemons_alive(cluster.state, cluster.placement)
    assert (alive["slurmdbd"], alive["mariadbd"], alive["slurmrestd"]) == (True, False, True)
    pid_script = next(c[-1] for c in ctl.calls if c[0] == "sh" and "/proc/" in c[-1])
    assert "/run/slurm/mariadbd.pid" in pid_script and "/run/slurm/slurmrestd.pid" in pid_script
    # On systemd hosts the roles' units say: simcluster-mariadb, simcluster-slurmrestd, Debian's slurmdbd.
    assert all(f"MainPID {unit}" in pid_script for unit in ("slurmdbd", "simcluster-mariadb", "simcluster-slurmrestd"))
    st = cluster_status(cluster)
    assert st.accounting["enabled"] and not st.accounting["healthy"] and not st.healthy
    assert st.accounting["mariadb"] == {"alive": False, "port": 3307}


def test_pids_alive_is_false_for_what_the_controller_does_not_answer():
    assert pids_alive(Controller(slurmctld_up=False), [("slurmdbd", "/run/slurm/slurmdbd.pid")]) == {"slurmdbd": False}


def test_pids_alive_reads_pid_files_without_signalling(tmp_path):
    """The pid-file branch (no systemd here) run for real: a process is alive by /proc, not by
    kill -0, which a sudoer logged in cannot send to root's daemons."""
    ours, dead = tmp_path / "ours.pid", tmp_path / "dead.pid"
    ours.write_text(f"{os.getpid()}\n")
    dead.write_text("999999999\n")
    alive = pids_alive(HostRunner(), [("slurmdbd", str(ours)), ("mariadbd", str(dead)),
                                      ("slurmrestd", str(tmp_path / "missing.pid"))])
    if os.path.isdir("/run/systemd/system"):  # a systemd host asks the units instead
        return
    assert alive == {"slurmdbd": True, "mariadbd": False, "slurmrestd": False}


class SudoerController(AccountingController):
    """A sudoer logged in: slurmdbd.conf (0600) unreadable; MariaDB's unit says its port."""

    def __init__(self, **kw):
        super().__init__(**kw)
        del self.files["/etc/slurm/slurmdbd.conf"]

    def _answer(self, argv):
        if argv[:4] == ["systemctl", "show", "-P", "ExecStart"] and argv[4] == "simcluster-mariadb":
            return ("{ path=/usr/sbin/mariadbd ; argv[]=/usr/sbin/mariadbd --no-defaults --port=3308 "
                    "--bind-address=127.0.0.1 ; ignore_errors=no }\n")
        return super()._answer(argv)


def test_storage_port_from_mariadbs_unit_where_slurmdbd_conf_is_unreadable():
    assert storage_port(SudoerController(), {"SLURM_CONF": "/etc/slurm/slurm.conf"}) == 3308
    assert storage_port(AccountingController(), {"SLURM_CONF": "/etc/slurm/slurm.conf"}) == 3307
