"""The faults of a deployed cluster (providers/ssh/faults.py) without a host: the command lines
sent to the hosts, what is parsed from their answers, which nodes heal resumes, the jump
through the controller, and the one-line errors."""

from __future__ import annotations

import subprocess

import paramiko
import pytest

from provisioner.cli.fault import command as fault_command
from provisioner.cluster.faults.registry import FAULTS, fault_named
from provisioner.cluster.model.slurm import NodeState
from provisioner.errors import UsageError
from provisioner.providers.ssh import faults
from provisioner.providers.ssh.session import HostUnreachable, SSHSession, Target
from provisioner.providers.ssh.units import UNITS, host_units
from tests.conftest import run_cli

BOOT_ID = "087ef69a-804a-4582-ad01-15edcae09940"


def test_the_verbs_over_ssh_are_rows_and_the_rest_is_refused_in_one_line():
    assert set(faults.SSH_VERBS) <= {f.verb for f in FAULTS}
    assert fault_named("reboot").target == "node" and fault_named("reboot").progress
    for verb in ("kill", "reboot", "heal", "time-limit", "preempt"):
        faults.check_available(verb)
    with pytest.raises(UsageError) as exc:
        faults.check_available("pause")
    assert exc.value.message == ("fault pause is not available on a deployed cluster (--ssh); available: kill, "
                                 "reboot, drain, kill-controller, stop-accounting, heal, time-limit, preempt")


def test_a_fault_a_deployed_cluster_lacks_is_refused_before_connecting(tmp_path):
    # Port 1 on loopback answers nothing: the refusal must come first, exit 2, one line.
    res = run_cli(["fault", "net", "node2", "--ssh", "runner@127.0.0.1:1"], tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "fault net is not available on a deployed cluster (--ssh)" in res.stderr
    assert "Traceback" not in res.stderr and "cannot reach" not in res.stderr


def test_every_fault_command_takes_the_ssh_options():
    for verb, cmd in fault_command.commands.items():
        opts = {o for p in cmd.params for o in p.opts}
        assert {"--ssh", "--ssh-key", "--known-hosts", "--insecure-accept-host-key"} <= opts, verb


def test_kill_sigkills_slurmd_and_the_job_steps_through_systemd_with_sudo():
    script = faults.kill_node_script()
    assert script.startswith(f"[ -d /run/systemd/system ] || exit {faults.NO_SYSTEMD_RC}; "
                             f"sudo -n true 2>/dev/null || exit {faults.NO_SUDO_RC}; ")
    assert faults.STEPS_BEFORE_KILL.startswith(faults.ON_SYSTEMD)
    order = ["systemctl kill -s KILL slurmd.service", "systemctl kill -s KILL '*slurmstepd.scope'",
             "pkill -KILL -x slurmstepd", "systemctl is-active slurmd.service"]
    assert [script.index(part) for part in order] == sorted(script.index(part) for part in order)
    assert "srun" not in script
    assert faults.kill_unit_script("slurmctld").endswith("sudo -n systemctl kill -s KILL slurmctld.service")
    assert "systemd-run --quiet --on-active=1 systemctl reboot" in faults.REBOOT


def test_heal_starts_only_a_hosts_own_units_that_are_enabled_and_do_not_run_in_dependency_order():
    assert host_units(controller=True, compute=True, accounting=True, rest=True) == UNITS
    assert host_units(controller=True, compute=False, accounting=True, rest=False) == \
        ("munge", "simcluster-mariadb", "slurmdbd", "slurmctld")
    # A compute host: never the slurmctld and slurmdbd Debian's packages enable there too.
    assert host_units(controller=False, compute=True, accounting=True, rest=True) == ("munge", "slurmd")
    script = faults.heal_script(UNITS)
    assert "for u in munge simcluster-mariadb slurmdbd slurmctld slurmd simcluster-slurmrestd; do" in script
    assert '"$(systemctl is-enabled "$u" 2>/dev/null)" = enabled ] || continue' in script
    assert 'systemctl is-active -q "$u" && continue' in script
    assert faults.parse_started("started slurmd\nfailed slurmdbd\nnoise\nstarted munge\n") == \
        (["slurmd", "munge"], ["slurmdbd"])
    assert faults.parse_started("") == ([], [])


def test_heal_script_runs_in_a_shell(tmp_path):
    # A real sh, with sudo and systemctl stand-ins: slurmd enabled and failed, munge enabled
    # and active, slurmctld not enabled here.
    stubs = ('sudo() { [ "$1" = -n ] && shift; "$@"; }; '
             'systemctl() { case "$1 $2 $3" in "is-enabled slurmd "|"is-enabled munge ") echo enabled;; '
             'is-enabled*) echo disabled; return 1;; "is-active -q munge") return 0;; is-active*) return 3;; '
             '"start slurmd ") return 0;; *) return 1;; esac; }; ')
    script = faults.heal_script(UNITS)
    systemd_host = script.replace("/run/systemd/system", str(tmp_path))  # a directory that exists
    out = subprocess.run(["sh", "-c", stubs + systemd_host], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (0, "started slurmd\n"), out
    # A host without systemd (a container the roles run the daemons in): exit 78, nothing tried.
    other = script.replace("/run/systemd/system", str(tmp_path / "absent"))
    out = subprocess.run(["sh", "-c", stubs + other], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (faults.NO_SYSTEMD_RC, ""), out


def test_boot_ids_and_timeouts_are_parsed():
    assert faults.parse_boot_id(f"{BOOT_ID}\n") == BOOT_ID
    assert faults.parse_boot_id("cat: /proc/...: No such file") == ""
    assert faults.seconds_of("5 sec") == 5 and faults.seconds_of("60 sec") == 60 and faults.seconds_of(None) is None
    assert faults.detects_fast({"SlurmdTimeout": "5 sec"})
    assert not faults.detects_fast({"SlurmdTimeout": "60 sec"}) and not faults.detects_fast({})


@pytest.mark.parametrize("state, reason, resumed", [
    ("down*", "Not responding", True),
    ("down", "Node unexpectedly rebooted", True),
    ("drained", "Kill task failed", True),
    ("draining", "batch job complete failure", True),
    ("drained", f"maintenance {faults.DRAIN_MARK}", True),
    ("drained", "maintenance", False),  # an administrator's drain stays
    ("down", "power cut, ticket 42", False),
    ("idle", "", False),
    ("idle*", "Not responding", False),  # not DOWN yet: it answers again by itself
])
def test_heal_resumes_only_what_a_fault_left_down(state, reason, resumed):
    assert faults.down_after_fault(NodeState("node2", state, reason)) is resumed


def test_a_nodes_address_is_local_to_the_controller_where_it_resolves_to_this_host():
    assert subprocess.run(["sh", "-c", faults.local_address_script("127.0.0.1")], capture_output=True,
                          text=True, timeout=30).stdout.strip() == "local"
    # TEST-NET-1 (RFC 5737): never an address of this host.
    assert subprocess.run(["sh", "-c", faults.local_address_script("192.0.2.77")], capture_output=True,
                          text=True, timeout=30).stdout.strip() == ""


class Transport:
    def __init__(self, refuse: bool):
        self.refuse, self.opened = refuse, []

    def is_active(self):
        return True

    def open_channel(self, kind, dest, src, timeout=None):
        self.opened.append((kind, dest))
        if self.refuse:
            raise paramiko.ChannelException(2, "Connect failed")
        return "channel"


class Client:
    def __init__(self, transport):
        self.transport = transport

    def get_transport(self):
        return self.transport


def test_a_compute_host_is_reached_through_the_controller():
    ctl = SSHSession(Target("runner", "127.0.0.1", 2222))
    ctl._client = Client(Transport(refuse=False))
    assert ctl.tunnel("10.77.0.12", 22) == "channel"
    assert ctl._client.transport.opened == [("direct-tcpip", ("10.77.0.12", 22))]
    ctl._client = Client(Transport(refuse=True))
    with pytest.raises(HostUnreachable) as exc:
        ctl.tunnel("10.77.0.12", 22)
    assert exc.value.message == "cannot reach host 10.77.0.12:22 from 127.0.0.1: Connect failed"
    ctl._client = None
    with pytest.raises(HostUnreachable, match="the SSH connection to 127.0.0.1 is closed"):
        ctl.tunnel("10.77.0.12", 22)


def test_an_unknown_host_key_behind_the_controller_says_where_to_scan_it():
    ctl = SSHSession(Target("runner", "ctl", 22))
    node = SSHSession(Target("runner", "10.77.0.12", 22), known_hosts="/tmp/kh", via=ctl)
    with pytest.raises(Exception) as exc:
        node._other_ssh_error(paramiko.SSHException("Server '10.77.0.12' not found in known_hosts"),
                              "10.77.0.12:22 (through ctl)")
    assert exc.value.message == "host key of 10.77.0.12:22 (through ctl) is not known (host key checking is on)"
    assert exc.value.hint.startswith("add it: ssh-keyscan 10.77.0.12 on ctl >> /tmp/kh")


def test_verify_gets_the_faults_of_a_deployed_cluster_reached_over_ssh():
    from provisioner.cluster.model.handle import Cluster
    from provisioner.providers.ssh.provider import SSHProvider
    from provisioner.verify.targets import target_of
    from tests.unit.providers.ssh.controller import Controller

    ctl = Controller()
    ctl.session = SSHSession(Target("runner", "ctl", 22))  # as SSHRunner has it (never connected here)
    provider = SSHProvider(ctl, "runner@ctl")
    target = target_of(Cluster(provider.discover(""), provider))
    assert isinstance(target.faults, faults.SSHFaults) and target.faults.session is ctl.session
    assert target.faults.fast is faults.detects_fast(target.faults.config)
    assert [callable(getattr(target.faults, m)) for m in ("kill", "kill_controller", "stop_accounting", "heal")] \
        == [True] * 4


def test_operator_commands_run_as_root_with_their_environment_after_sudo():
    assert faults.as_root(["scontrol", "update", "nodename=node2", "state=resume"], user="runner") == \
        ["sudo", "-n", "scontrol", "update", "nodename=node2", "state=resume"]
    assert faults.as_root(["scontrol", "requeue", "7"], {"SLURM_CONF": "/etc/slurm/slurm.conf"}, user="runner") == \
        ["sudo", "-n", "env", "SLURM_CONF=/etc/slurm/slurm.conf", "scontrol", "requeue", "7"]
    assert faults.as_root(["scontrol", "requeue", "7"], user="root") == ["scontrol", "requeue", "7"]
