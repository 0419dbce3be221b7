"""`up` as data (provisioner/cluster/lifecycle/steps.py): which steps run for which spec, in which
order, what each says, and how run_steps reports and saves; no daemon is started (the
step functions are replaced where a test runs the list)."""

from __future__ import annotations

import re
import stat
from types import SimpleNamespace

import pytest

from provisioner.cluster.lifecycle import steps
from provisioner.cluster.lifecycle.steps import STEPS, Step, UpRun, run_steps, steps_for
from provisioner.cluster.model.state import ClusterState
from tests.unit.cluster.fakes import FakeProvider, home, make_cluster  # noqa: F401 (fixture)

BASE = ["configs", "munged", "slurmctld", "slurmd", "ready"]


def names(cluster):
    return [s.name for s in steps_for(cluster)]


def test_step_names_are_unique():
    assert len({s.name for s in STEPS}) == len(STEPS)


def test_a_plain_cluster_runs_the_base_steps_in_order(home):
    assert names(make_cluster("s1", FakeProvider())) == BASE


def test_accounting_adds_the_database_before_slurmctld_and_registration_after_ready(home):
    assert names(make_cluster("s2", FakeProvider(), accounting=True)) == [
        "configs", "munged", "database", "mariadb", "slurmdbd", "associations", "slurmctld", "slurmd", "ready",
        "registered"]


def test_fake_gpus_add_their_devices_after_the_configs(home):
    assert names(make_cluster("s3", FakeProvider(), fakeGpus=4)) == ["configs", "fake-gpus", *BASE[1:]]


def test_real_gpus_make_no_devices(home):
    assert "fake-gpus" not in names(make_cluster("s4", FakeProvider(), gpus="0,1"))


def test_what_the_steps_say(home):
    c = make_cluster("s5", FakeProvider(), fakeGpus=4, accounting=True)
    said = {s.name: s.describe(c) for s in steps_for(c)}
    assert said["fake-gpus"] == "making 4 fake GPU devices"
    assert said["slurmctld"] == "starting slurmctld on port 26817"
    assert said["slurmd"] == "starting 2 slurmd"
    assert said["ready"] == "waiting for 2 nodes to be idle"
    assert said["mariadb"] == "starting MariaDB on port 26901" and said["slurmdbd"] == "starting slurmdbd on port 26900"
    assert said["munged"] == "starting munged"  # one machine: no count


def test_run_steps_reports_each_step_and_saves_the_state(home, monkeypatch):
    c = make_cluster("s6", FakeProvider(), phase="starting")
    ran = []
    monkeypatch.setattr(steps, "STEPS", (
        Step("one", lambda c: "doing one", lambda up: ran.append("one")),
        Step("skipped", lambda c: "never", lambda up: ran.append("skipped"), lambda c: False),
        Step("two", lambda c: "doing two", lambda up: ran.append("two")),
    ))
    lines = []
    run_steps(UpRun(c, lines.append, 5.0))
    assert ran == ["one", "two"]
    assert len(lines) == 2
    assert re.fullmatch(r" - doing one \.\.\. done \(\d+\.\d\ds\)", lines[0])
    assert ClusterState.load(c.state.layout).phase == "running"


def test_a_failing_step_is_reported_and_stops_the_list_with_the_state_saved(home, monkeypatch):
    c = make_cluster("s7", FakeProvider(), phase="starting")
    ran = []

    def fail(up):
        up.cluster.state.pids["slurmctld"] = 99  # what it started before it failed
        raise RuntimeError("slurmctld did not listen")

    monkeypatch.setattr(steps, "STEPS", (
        Step("one", lambda c: "doing one", fail),
        Step("two", lambda c: "doing two", lambda up: ran.append("two")),
    ))
    lines = []
    with pytest.raises(RuntimeError, match="did not listen"):
        run_steps(UpRun(c, lines.append, 5.0))
    assert ran == [] and len(lines) == 1 and " ... FAILED (" in lines[0]
    saved = ClusterState.load(c.state.layout)
    assert saved.phase == "starting" and saved.pids["slurmctld"] == 99  # `down` finds what was started


def test_write_configs_renders_into_the_config_dir_with_a_private_munge_key(home):
    c = make_cluster("s8", FakeProvider(), phase="starting")
    steps.write_configs(UpRun(c, lambda line: None, 5.0))
    etc = c.placement.config_dir
    assert "SlurmctldPort=26817" in (etc / "slurm.conf").read_text()
    key = etc / "munge.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o400 and key.stat().st_size == 1024


def test_write_configs_keeps_the_database_password_out_of_the_state(home):
    c = make_cluster("s9", FakeProvider(), phase="starting", accounting=True)
    up = UpRun(c, lambda line: None, 5.0)
    steps.write_configs(up)
    dbd = c.placement.config_dir / "slurmdbd.conf"
    assert up.db_password in dbd.read_text()
    assert stat.S_IMODE(dbd.stat().st_mode) & 0o077 == 0
    c.state.save()
    assert up.db_password not in c.state.layout.state_file.read_text()


def test_on_each_machine_runs_keys_of_one_machine_in_order():
    shared = object()
    c = SimpleNamespace(runner=lambda key: shared)
    seen = []
    steps.on_each_machine(c, ["node1", "node2", "node3"], seen.append)
    assert seen == ["node1", "node2", "node3"]


def test_on_each_machine_reaches_every_machine_and_raises_a_failure():
    machines = {k: object() for k in ("controller", "node1", "node2")}
    c = SimpleNamespace(runner=lambda key: machines[key])
    seen = []

    def act(key):
        seen.append(key)
        if key == "node1":
            raise OSError("node1 is gone")

    with pytest.raises(OSError, match="node1 is gone"):
        steps.on_each_machine(c, list(machines), act)
    assert sorted(seen) == ["controller", "node1", "node2"]  # the others still ran


class BootingProvider(FakeProvider, steps.BootsDaemons):
    """A provider whose machines start their own daemons (BootsDaemons), recording the plan."""

    def __init__(self, boots: bool):
        super().__init__()
        self.booting, self.plans = boots, []

    def boots(self, state):
        return self.booting

    def boot_machines(self, state, plan):
        self.plans.append(plan)


def test_machines_that_boot_are_started_after_the_configs_and_given_the_plan(home):
    provider = BootingProvider(True)
    c = make_cluster("s9", provider, fakeGpus=2)
    assert names(c) == ["configs", "machines", "fake-gpus", *BASE[1:]]
    next(s for s in steps_for(c) if s.name == "machines").run(UpRun(c, lambda line: None, 10.0))
    plan = provider.plans[0]
    assert [b.launch.key for b in plan["controller"]] == ["munged", "slurmctld"]
    # One munged for all (the fake placement's munged_on), a slurmd per node, keyed by node.
    assert {k: [b.launch.key for b in v] for k, v in plan.items() if k != "controller"} == {
        n.name: [f"slurmd:{n.name}"] for n in c.spec.nodes}
    # Made by an image that cannot boot: no machines step, the steps start every daemon.
    assert "machines" not in names(make_cluster("s10", BootingProvider(False)))
