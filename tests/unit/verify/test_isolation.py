"""basic.isolation and basic.limits without a cluster: what the nodes are said to have, and
how each part's job output is judged (PASS only when every part that applies passed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.verify import isolation
from provisioner.verify.isolation import Parts, judge_bind, judge_devices, judge_etc_slurm, judge_peer
from provisioner.verify.outcome import FAIL, PASS, SKIP, CheckFailed, CheckSkipped
from provisioner.verify.targets import NodeFacts, node_facts

SHARED = "rootless: nodes share this host's network (a loopback address each; ports can clash)"
NO_CGROUPS = "rootless: no cgroup can be made without root, so --mem, devices and cores are not enforced"


def placement(hosts=False, subnet=None, cgroups=False, network="", limits="", etc="", dev="/state/dev"):
    render = SimpleNamespace(nodes_are_hosts=hosts, node_subnet=subnet, cgroups=cgroups,
                             paths=SimpleNamespace(dev=dev))
    return SimpleNamespace(render=render, node_network=network, node_cgroups=limits, node_etc_slurm=etc)


# -- node_facts: the one decision --------------------------------------------------------------
def test_local_nodes_with_namespaces_and_cgroups_have_everything():
    f = node_facts(placement(subnet="198.18.4.0/24", cgroups=True, network="a network namespace each (...)",
                             limits="enforced: ...", etc="the cluster's config (mounted ...)"), fake_gpus=True)
    assert (f.own_network, f.cgroups, f.etc_slurm, f.nodes_are_hosts) == (True, True, True, False)
    assert f.network == "a network namespace each (...)" and f.limits == "enforced: ..."
    assert f.gpu_device_dir == "/state/dev"


def test_rootless_nodes_share_the_network_and_say_why():
    f = node_facts(placement(network=SHARED, limits=NO_CGROUPS,
                             etc="no namespaces here (libnss_wrapper): nodes see this host's /etc/slurm, ..."))
    assert not f.own_network and not f.cgroups and not f.etc_slurm
    assert f.network == SHARED and f.limits == NO_CGROUPS
    assert f.etc_slurm_note.startswith("no namespaces here")
    assert f.gpu_device_dir == "/dev"  # real GPUs


def test_the_decision_is_the_render_inputs_not_the_wording_of_the_notes():
    # A subnet means namespaces whatever the note says; no subnet means the host's network.
    assert node_facts(placement(subnet="198.18.0.0/24", network="anything")).own_network
    assert not node_facts(placement(subnet=None, network="a network namespace each")).own_network
    assert not node_facts(placement(cgroups=False, limits="enforced: ...")).cgroups


def test_containers_and_deployed_hosts_have_their_own_network_and_limits_only_with_cgroups():
    docker = node_facts(placement(hosts=True, etc="the cluster's config (mounted read-only, as /etc/slurm-sim too)"))
    assert docker.own_network and docker.nodes_are_hosts and docker.etc_slurm and not docker.cgroups
    assert docker.network == "every node is a host of its own"
    assert "not enforced" in docker.limits
    assert node_facts(placement(hosts=True, cgroups=True)).cgroups
    # A deployed cluster's placement says nothing of /etc/slurm: its config is there by default.
    assert node_facts(placement(hosts=True, etc="")).etc_slurm


def test_a_local_state_that_does_not_say_is_not_taken_as_isolated():
    f = node_facts(placement(etc=""))
    assert not f.own_network and not f.cgroups and not f.etc_slurm
    assert "does not say" in f.etc_slurm_note
    u = NodeFacts.unknown()
    assert not (u.own_network or u.cgroups or u.etc_slurm) and "does not say" in u.network


# -- the verdict ---------------------------------------------------------------------------------
def test_pass_only_when_every_part_that_applies_passed():
    p = Parts()
    p.add("a", PASS, "fine")
    p.add("b", PASS, "also")
    assert p.verdict() == (PASS, "a: fine; b: also")
    p.add("c", SKIP, SHARED)
    status, text = p.verdict()
    assert status == SKIP and text.startswith(f"c SKIP: {SHARED}") and "a: fine" in text
    p.add("d", FAIL, "broken")
    status, text = p.verdict()
    assert status == FAIL and text.startswith("d FAIL: broken; c SKIP")
    assert p.data()["d"] == {"status": FAIL, "detail": "broken"}
    assert Parts().verdict()[0] == SKIP  # nothing checked is never a PASS


# -- the parts' judges -------------------------------------------------------------------------
BOUND = ("BIND rank=0 node=node1 port=32107 ok=1 start=100.000 end=102.000\n"
         "BIND rank=1 node=node2 port=32107 ok=1 start=100.100 end=102.110\n")


def test_bind_passes_when_both_nodes_held_the_port_at_once():
    status, detail = judge_bind(BOUND, ["node1", "node2"], "32107")
    assert status == PASS and "0.0.0.0:32107 at once (1.9 s)" in detail


def test_bind_fails_on_a_clash_a_missing_node_or_no_overlap():
    clash = ("BIND rank=0 node=node1 port=32107 ok=1 start=1 end=3\n"
             "BIND rank=1 node=node2 port=32107 ok=0 error=[Errno 98] Address already in use\n")
    status, detail = judge_bind(clash, ["node1", "node2"], "32107")
    assert status == FAIL and "node2: [Errno 98] Address already in use" in detail
    assert judge_bind(BOUND.splitlines()[0], ["node1", "node2"], "1")[0] == FAIL
    apart = "BIND rank=0 node=node1 ok=1 start=1 end=3\nBIND rank=1 node=node2 ok=1 start=4 end=6\n"
    status, detail = judge_bind(apart, ["node1", "node2"], "1")
    assert status == FAIL and "not at the same time" in detail
    # Clocks that disagree (two VMs) do not matter where the connection between them proves it.
    connected = apart + ("CONNECT node=node2 to=node1 ok=1 local=10.77.0.12\n"
                         "PEER node=node1 ok=1 from_node=node2 peer=10.77.0.12 resolved=10.77.0.12\n")
    status, detail = judge_bind(connected, ["node1", "node2"], "1")
    assert status == PASS and "one connected to the other on it" in detail, detail
    no_peer = apart + "CONNECT node=node2 to=node1 ok=1 local=10.77.0.12\nPEER node=node1 ok=0 error=timeout\n"
    assert judge_bind(no_peer, ["node1", "node2"], "1")[0] == FAIL


def test_peer_must_come_from_the_connecting_nodes_own_address():
    ok = ("CONNECT node=node2 to=node1 ok=1 local=198.18.0.4\n"
          "PEER node=node1 ok=1 from_node=node2 peer=198.18.0.4 resolved=198.18.0.4\n")
    assert judge_peer(ok, "node1", "node2")[0] == PASS
    shared = "PEER node=node1 ok=1 from_node=node2 peer=127.0.0.1 resolved=127.0.1.2\n"
    status, detail = judge_peer(shared, "node1", "node2")
    assert status == FAIL and "from 127.0.0.1, not from node2's address (127.0.1.2" in detail
    refused = "CONNECT node=node2 to=node1 ok=0 error=[Errno 111] Connection refused\n"
    assert "could not connect to node1: [Errno 111] Connection refused" in judge_peer(refused, "node1", "node2")[1]
    assert judge_peer("", "node1", "node2") == (FAIL, "node1 printed no peer address")


def test_etc_slurm_wants_a_node_name_from_srun_without_slurm_conf():
    assert judge_etc_slurm("ETCSLURM rc=0 out=node1\n", ["node1", "node2"])[0] == PASS
    assert judge_etc_slurm("ETCSLURM rc=0 out=node2.cluster.example\n", ["node1", "node2"])[0] == PASS
    status, detail = judge_etc_slurm("ETCSLURM rc=1 out=srun: error: s_p_parse_file: unable to read\n",
                                     ["node1", "node2"])
    assert status == FAIL and "exited 1" in detail
    assert judge_etc_slurm("ETCSLURM rc=0 out=vm\n", ["node1", "node2"])[0] == FAIL  # the host's name
    assert judge_etc_slurm("", ["node1"])[0] == FAIL


def dev(path, got, msg="", owner="own"):
    return f"DEV node=node1 owner={owner} path={path} got={got} msg={msg}\n"


def test_devices_own_gpu_let_through_others_refused():
    own, foreign = ["/s/dev/nvidia0"], ["/s/dev/nvidia1"]
    fake_ok = dev(own[0], "ENXIO", "No such device or address") + dev(foreign[0], "EPERM", "Operation not permitted")
    status, detail = judge_devices(fake_ok, own, foreign, fake=True, absent_ok=False)
    assert status == PASS and "/s/dev/nvidia0 (ENXIO" in detail and "1 other GPU device(s): EPERM" in detail
    # Without a devices cgroup every open gets through: the other node's GPU too.
    leaky = dev(own[0], "ENXIO") + dev(foreign[0], "ENXIO")
    status, detail = judge_devices(leaky, own, foreign, fake=True, absent_ok=False)
    assert status == FAIL and "/s/dev/nvidia1: ENXIO" in detail
    # Real GPUs open; a refused own GPU fails.
    assert judge_devices(dev(own[0], "OK") + dev(foreign[0], "EPERM"), own, foreign, False, False)[0] == PASS
    assert judge_devices(dev(own[0], "EPERM") + dev(foreign[0], "EPERM"), own, foreign, False, False)[0] == FAIL


def test_devices_a_nodes_second_gpu_is_refused_to_a_one_gpu_job_and_absent_is_ok_only_on_hosts():
    own = ["/dev/nvidia0", "/dev/nvidia1"]
    text = dev(own[0], "EPERM") + dev(own[1], "OK") + dev("/dev/nvidia2", "ENOENT", owner="other")
    assert judge_devices(text, own, ["/dev/nvidia2"], fake=False, absent_ok=True)[0] == PASS
    assert judge_devices(text, own, ["/dev/nvidia2"], fake=False, absent_ok=False)[0] == FAIL
    both = dev(own[0], "OK") + dev(own[1], "OK") + dev("/dev/nvidia2", "EPERM")
    status, detail = judge_devices(both, own, ["/dev/nvidia2"], fake=False, absent_ok=False)
    assert status == FAIL and "expected one OK" in detail


# -- SKIP before any job, with the placement's reason ----------------------------------------
def spec(n_nodes, gpus=False, memory=1000):
    nodes = tuple(NodeSpec(f"node{i + 1}", (i,) if gpus else (), 2, memory) for i in range(n_nodes))
    return ClusterSpec("t", "local", nodes, (PartitionSpec("main", tuple(n.name for n in nodes), default=True),),
                       fake_gpus=gpus)


def ctx_of(spec_, facts):
    def no_jobs(*a, **kw):
        raise AssertionError("no job may be submitted")
    return SimpleNamespace(spec=spec_, target=SimpleNamespace(nodes=facts, python_bin="/usr/bin"),
                           limit=lambda d: d, submit=no_jobs, check_dir=lambda c: None)


SHARED_FACTS = node_facts(placement(network=SHARED, limits=NO_CGROUPS,
                                    etc="no namespaces here (libnss_wrapper): nodes see this host's /etc/slurm"))


def test_isolation_skips_one_node_and_a_cluster_with_nothing_of_its_own():
    with pytest.raises(CheckSkipped, match="needs 2 nodes in one partition"):
        isolation.check_isolation(ctx_of(spec(1), SHARED_FACTS))
    with pytest.raises(CheckSkipped) as exc:
        isolation.check_isolation(ctx_of(spec(2, gpus=True), SHARED_FACTS))
    reason = exc.value.reason
    assert f"same port on 2 nodes, peer address SKIP: {SHARED}" in reason and reason.count(SHARED) == 1
    assert "/etc/slurm SKIP: no namespaces here" in reason and f"GPU devices SKIP: {NO_CGROUPS}" in reason


def test_limits_skip_with_the_reason_cgroups_are_off_or_no_node_has_the_memory():
    with pytest.raises(CheckSkipped) as exc:
        isolation.check_limits(ctx_of(spec(2), SHARED_FACTS))
    assert exc.value.reason == NO_CGROUPS
    on = node_facts(placement(subnet="198.18.0.0/24", cgroups=True))
    with pytest.raises(CheckSkipped, match="no node has 200 MB"):
        isolation.check_limits(ctx_of(spec(2, memory=100), on))


def test_limits_fail_names_the_end_state(monkeypatch):
    on = node_facts(placement(subnet="198.18.0.0/24", cgroups=True))
    out = "TOUCHED mb=50 after=0.1\nTOUCHED mb=600 after=0.9\nALL mb=600 (the limit was not enforced)\n"
    job = SimpleNamespace(job_id="7", output="limits-7.out")
    ctx = SimpleNamespace(
        spec=spec(1), target=SimpleNamespace(nodes=on, python_bin="/usr/bin"), limit=lambda d: d,
        check_dir=lambda c: __import__("pathlib").Path("/x"), files=SimpleNamespace(write_text=lambda *a: None),
        time_minutes=lambda s: 2, submit=lambda *a, **kw: job, wait=lambda j, t: SimpleNamespace(states=["COMPLETED"]),
        client=SimpleNamespace(show_job=lambda i: {"JobState": "COMPLETED", "RunTime": "00:00:01"}),
        read=lambda p: out)
    with pytest.raises(CheckFailed) as exc:
        isolation.check_limits(ctx)
    assert "ended COMPLETED after touching 600 MB" in exc.value.message and "expected OUT_OF_MEMORY" in exc.value.message
    ctx.client = SimpleNamespace(show_job=lambda i: {"JobState": "OUT_OF_MEMORY", "RunTime": "00:00:01"})
    ctx.read = lambda p: "TOUCHED mb=150 after=0.2\n"
    outcome = isolation.check_limits(ctx)
    assert "ended OUT_OF_MEMORY" in outcome.message and "150 MB touched" in outcome.message
    assert outcome.data["state"] == "OUT_OF_MEMORY" and outcome.data["run_time"] == "00:00:01"
