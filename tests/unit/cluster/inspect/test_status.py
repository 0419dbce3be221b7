"""One status model (provisioner/cluster/inspect/status.py): its keys, and `healthy`, problems and
hints computed from what the daemons and slurmctld answer, here a scripted runner's
answers (tests/unit/cluster/fakes.py); no daemon runs."""

from __future__ import annotations

from provisioner.cluster.inspect.status import cluster_status
from provisioner.cluster.model.slurm import SINFO_NODE_ARGS
from tests.unit.cluster.fakes import home  # noqa: F401 (fixture)
from tests.unit.cluster.fakes import FakeMachinesProvider, FakeProvider, ScriptedRunner, make_cluster

SINFO = tuple(SINFO_NODE_ARGS)
# The keys `status --json` has always given (scripts read them).
KEYS = {"name", "backend", "phase", "healthy", "fake_gpus", "state_dir", "slurm_conf", "shared_dir", "controller",
        "munged", "accounting", "nodes", "faults", "hints", "slurm_version"}
NODE_KEYS = {"name", "host", "state", "reason", "ready", "gpus", "cpus", "memory_mb", "port", "slurmd_alive", "problem"}


def runner(sinfo: str = "node1|idle|none\nnode2|idle|none\n", sinfo_rc: int = 0) -> ScriptedRunner:
    return ScriptedRunner({SINFO: (sinfo_rc, sinfo, "" if sinfo_rc == 0 else "Unable to contact slurm controller"),
                           ("sinfo", "--version"): (0, "slurm-wlm 24.11.5\n", "")})


def test_a_healthy_cluster_and_the_keys_of_its_json(home):
    c = make_cluster("t1", FakeProvider(runner()), fakeGpus=2)
    st = cluster_status(c)
    d = st.to_dict()
    assert KEYS <= set(d) and NODE_KEYS <= set(d["nodes"][0])  # none lost; a new key is fine
    assert st.healthy and st.phase == "running" and st.hints == []
    assert [(n["name"], n["state"], n["ready"], n["problem"]) for n in d["nodes"]] == [
        ("node1", "idle", True, ""), ("node2", "idle", True, "")]
    assert d["nodes"][0]["gpus"] == [0] and d["fake_gpus"] is True
    assert d["controller"] == {"alive": True, "host": "this host", "port": 26817, "responding": True}
    assert d["munged"]["alive"] is True
    assert d["accounting"]["enabled"] is False and d["accounting"]["healthy"] is True
    assert d["slurm_conf"] == c.placement.paths.slurm_conf
    assert d["shared_dir"] is None  # the jobs see this host's job directory as it is


def test_a_dead_slurmd_is_unhealthy_with_its_problem_and_a_hint(home):
    c = make_cluster("t2", FakeProvider(runner("node1|idle|none\nnode2|down*|Not responding\n")))
    c.provider.the_runner.alive.discard(c.state.pids["slurmd:node2"])
    st = cluster_status(c)
    assert not st.healthy
    node2 = st.nodes[1]
    assert (node2.slurmd_alive, node2.ready, node2.problem, node2.reason) == (False, False, "slurmd is dead",
                                                                              "Not responding")
    assert any(h.startswith("dead daemons (slurmd:node2): 'simcluster up --name t2'") for h in st.hints)


def test_a_slurmd_alive_but_not_answering_is_hung(home):
    c = make_cluster("t3", FakeProvider(runner("node1|idle|none\nnode2|idle*|none\n")))
    st = cluster_status(c)
    assert not st.healthy
    assert st.nodes[1].problem == "slurmd alive but not answering slurmctld"
    assert any("slurmd of node2 runs but does not answer" in h for h in st.hints)


def test_a_controller_that_does_not_answer(home):
    c = make_cluster("t4", FakeProvider(runner(sinfo_rc=1)))
    st = cluster_status(c)
    assert not st.healthy and st.controller.alive and st.controller.responding is False
    assert {n.state for n in st.nodes} == {"unknown"} and not any(n.ready for n in st.nodes)


def test_every_daemon_dead_reads_as_stopped_with_the_start_hint(home):
    c = make_cluster("t5", FakeProvider(runner()))
    c.provider.the_runner.alive.clear()
    st = cluster_status(c)
    assert st.phase == "stopped" and not st.healthy
    assert st.hints == ["stopped: 'simcluster start --name t5' brings it back"]


def test_faults_in_effect_are_listed_with_the_heal_hint(home):
    c = make_cluster("t6", FakeProvider(runner()))
    c.state.faults = [{"what": "pause", "node": "node2", "since": 1.0}]
    st = cluster_status(c)
    assert st.faults == [{"what": "pause", "node": "node2", "since": 1.0}]
    assert st.nodes[1].problem == "paused by 'simcluster fault pause'"
    assert "faults in effect: 'simcluster fault heal --name t6' undoes them" in st.hints


def test_accounting_counts_for_health(home):
    c = make_cluster("t7", FakeProvider(runner()), accounting=True)  # no slurmdbd/mariadbd pid recorded
    st = cluster_status(c)
    assert st.accounting["enabled"] and not st.accounting["healthy"] and not st.healthy


def test_machines_that_stopped_make_the_cluster_unhealthy(home):
    c = make_cluster("t8", FakeMachinesProvider(runner(), running=False))
    assert not cluster_status(c).healthy


def test_the_slurm_version_is_asked_where_the_machines_run(home):
    c = make_cluster("t9", FakeMachinesProvider(runner()))
    st = cluster_status(c)
    assert st.healthy and st.slurm_version == "24.11.5"
    assert ["sinfo", "--version"] in c.provider.the_runner.calls
