"""verify's pieces without a cluster: suite parsing, outcomes, SKIP rules, JSON/JUnit, parsing.

Fast (no daemons): they pin down the report contract CI relies on.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from provisioner.cluster.model.jobfiles import HostDirFiles
from provisioner.cluster.model.partitions import covering_partitions
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import UsageError
from provisioner.verify import training
from provisioner.verify.basic import parse_kv, training_partition
from provisioner.verify.check_runner import Check, run_one
from provisioner.verify.jobs import first_error
from provisioner.verify.outcome import FAIL, PASS, SKIP, CheckFailed, CheckSkipped, Outcome
from provisioner.verify.report import failure_block, live_line, summary_table, suite_seconds, to_json, write_junit
from provisioner.verify.suites import CHECKS, checks_for, parse_suites


def spec(nodes=2, parts=None) -> ClusterSpec:
    ns = tuple(NodeSpec(f"node{i + 1}", (i,), 2, 1000) for i in range(nodes))
    parts = parts or (PartitionSpec("main", tuple(n.name for n in ns), default=True),)
    return ClusterSpec("t", "local", ns, tuple(parts), fake_gpus=True)


def test_suites_parse_in_canonical_order_and_reject_unknown_names():
    # "rest" is in "all"; its check joins only on clusters made with --rest (applies).
    assert parse_suites("all") == ["basic", "signals", "rest", "ddp", "fsdp", "deepspeed", "megatron"]
    assert "rest.api" not in [c.name for c in checks_for(parse_suites("all"))]
    # signals (a 30 s timer in slurmctld) is apart, so "basic" takes seconds; "all" has both.
    assert "signals.time-limit" not in [c.name for c in checks_for(["basic"])]
    assert parse_suites("megatron, basic") == ["basic", "megatron"]
    with pytest.raises(UsageError) as exc:
        parse_suites("ddp,bogus")
    assert exc.value.exit_code == 2 and "bogus" in exc.value.message
    # The controller/node gates always run first; a training suite brings only its check.
    assert [c.name for c in checks_for(["ddp"])] == ["basic.controller", "basic.nodes", "ddp.train"]
    # rest.api joined (clusters made with --rest), then faults.gpu-faults
    assert len({c.name for c in CHECKS}) == len(CHECKS) == 27
    # faults is not part of all (it breaks the cluster on purpose); named, it runs.
    assert parse_suites("faults") == ["faults"] and parse_suites("all,faults")[-1] == "faults"
    # basic.accounting joins only on clusters with accounting.
    from provisioner.config import load_spec
    plain = [c.name for c in checks_for(["basic"], load_spec(None, {}))]
    with_acct = [c.name for c in checks_for(["basic"], load_spec(None, {"accounting": True}))]
    assert "basic.accounting" not in plain and "basic.accounting" in with_acct
    assert len(with_acct) == len(plain) + 1


def _check(func) -> Check:
    return Check("x.y", "x", func, "what it checks")


def test_outcomes_become_pass_fail_skip(tmp_path):
    assert run_one(CTX, _check(lambda ctx: Outcome("fine"))).status == PASS

    def skip(ctx):
        raise CheckSkipped("deepspeed is not installed: pip install -e '.[train]'")
    res = run_one(CTX, _check(skip))
    assert res.status == SKIP and "pip install" in res.message

    out = tmp_path / "job.out"
    out.write_text("starting\n[rank1]: RuntimeError: boom on rank 1\n" + "".join(f"line {i}\n" for i in range(40)))

    def fail(ctx):
        raise CheckFailed("loss did not go down", output=out)
    res = run_one(CTX, _check(fail))
    assert res.status == FAIL and res.output == str(out)
    assert res.tail.splitlines()[-1] == "line 39" and len(res.tail.splitlines()) == 25
    assert res.first_error == "[rank1]: RuntimeError: boom on rank 1"
    block = failure_block(res)
    assert "first error in the output: [rank1]: RuntimeError: boom" in block and f"full output: {out}" in block

    res = run_one(CTX, _check(lambda ctx: 1 / 0))  # a bug in a check is a FAIL, not a crash
    assert res.status == FAIL and "ZeroDivisionError" in res.message
    assert live_line(res).startswith("x.y") and " FAIL " in live_line(res)


CTX = SimpleNamespace(files=HostDirFiles(Path("/"), "/"))  # job outputs are read from this host


def test_a_missing_training_stack_is_skip_with_the_install_hint():
    target = SimpleNamespace(missing_module=lambda mods: mods[-1], install_hint="pip install -e '.[train]' (or make setup)")
    ctx = SimpleNamespace(spec=spec(), target=target)
    for func in (training.check_ddp, training.check_fsdp, training.check_deepspeed, training.check_megatron):
        with pytest.raises(CheckSkipped) as exc:
            func(ctx)
        assert "pip install -e '.[train]'" in exc.value.reason


def test_training_result_parsing_and_judging():
    text = "noise\n[rank 0] hello\nSIMCLUSTER_RESULT {\"loss_first\": 4.0, \"loss_last\": 1.0}\n"
    assert training.parse_result(text) == {"loss_first": 4.0, "loss_last": 1.0}
    assert training.parse_result("no result here") is None
    s = spec()
    ctx = SimpleNamespace(spec=s, node_names=["node1", "node2"],
                          target=SimpleNamespace(visible_gpus=lambda node, count=None: ",".join(map(str, s.node(node).gpus[:count]))))
    good = {"world_size": 2, "device": "cpu", "backend": "gloo", "loss_first": 4.0, "loss_last": 1.0,
            "placement": [{"rank": 0, "node": "node1", "cuda_visible_devices": "0"},
                          {"rank": 1, "node": "node2", "cuda_visible_devices": "1"}]}
    assert training.common_problems(ctx, good, 2, with_gpu=True) == []
    bad = dict(good, loss_last=3.9, backend="nccl",
               placement=[{"rank": 0, "node": "node1", "cuda_visible_devices": "0"},
                          {"rank": 1, "node": "node1", "cuda_visible_devices": "0"}])
    problems = " ".join(training.common_problems(ctx, bad, 2, with_gpu=True))
    assert "loss did not go down" in problems and "2 different nodes" in problems
    assert "expected gloo" in problems and "expected '1'" not in problems


def test_partitions_cover_every_node_default_first():
    s = spec(4, parts=(PartitionSpec("debug", ("node1", "node2")),
                       PartitionSpec("batch", ("node1", "node2", "node3", "node4"), default=True)))
    assert covering_partitions(s) == [("batch", ["node1", "node2", "node3", "node4"])]
    s = spec(3, parts=(PartitionSpec("a", ("node1", "node2"), default=True), PartitionSpec("b", ("node3",))))
    assert covering_partitions(s) == [("a", ["node1", "node2"]), ("b", ["node3"])]
    assert training_partition(s, 2) == ("a", ["node1", "node2"])
    assert training_partition(spec(1), 2) is None


def test_parse_kv_and_first_error(tmp_path):
    assert parse_kv("TASK node=node1 procid=3 master=127.0.0.1") == {"node": "node1", "procid": "3", "master": "127.0.0.1"}
    assert parse_kv("BATCH a= b=x y") == {"a": "", "b": "x y"}
    out = tmp_path / "o"
    out.write_text("Traceback (most recent call last):\n    raise RuntimeError(\n"
                   "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1 got signal: 15\n"
                   "0: ValueError: bad shape\nsrun: error: node2: task 1: Exited with exit code 1\n")
    assert first_error(out.read_text()) == "0: ValueError: bad shape"
    assert first_error(None) == ""


def test_first_error_names_the_worker_torchrun_saw_die_first(tmp_path):
    # A rank that aborts in C++ prints no exception; torchrun's Root Cause block names it,
    # while the ranks srun then SIGTERMs print the longer tracebacks below.
    out = tmp_path / "o"
    out.write_text("SIMCLUSTER_RESULT {}\nterminate called without an active exception\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                   "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-23_10:39:47\n"
                   "  host      : node2\n  rank      : 1 (local_rank: 0)\n"
                   "  exitcode  : -6 (pid: 777)  (SIGABRT)\n"
                   "srun: error: node2: task 1: Exited with exit code 1\n"
                   "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1407 got signal: 15\n")
    assert first_error(out.read_text()) == ("terminate called without an active exception (torchrun: first failure "
                                "rank 1 (local_rank: 0) on node2: exitcode -6 (pid: 777) (SIGABRT))")
    out.write_text("Root Cause (first observed failure):\n  host      : node1\n  rank      : 0\n"
                   "  exitcode  : -9 (pid: 5)\n")
    assert first_error(out.read_text()) == "torchrun: first failure rank 0 on node1: exitcode -9 (pid: 5)"


def test_json_and_junit_are_well_formed(tmp_path):
    ok = run_one(CTX, Check("basic.array", "basic", lambda ctx: Outcome("4 tasks", {"n": 4}), "array"))
    skip = run_one(CTX, Check("megatron.tp2", "megatron", lambda ctx: (_ for _ in ()).throw(CheckSkipped("no")), "m"))
    bad = run_one(CTX, Check("ddp.train", "ddp", lambda ctx: (_ for _ in ()).throw(CheckFailed("hung <&>")), "d"))
    results = [ok, bad, skip]
    report = json.loads(to_json("c1", results, 12.5, Path("/tmp/run"), ["basic", "ddp", "megatron"]))
    assert report["passed"] is False and report["counts"] == {"PASS": 1, "FAIL": 1, "SKIP": 1}
    assert [c["status"] for c in report["checks"]] == ["PASS", "FAIL", "SKIP"]
    assert report["checks"][0]["data"] == {"n": 4}
    junit = tmp_path / "sub" / "v.xml"
    write_junit(junit, "c1", results, 12.5)
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "3"
    assert root.get("failures") == "1" and root.get("skipped") == "1"
    suites = {ts.get("name"): ts for ts in root.findall("testsuite")}
    assert set(suites) == {"simcluster.verify.basic", "simcluster.verify.ddp", "simcluster.verify.megatron"}
    failure = suites["simcluster.verify.ddp"].find("testcase/failure")
    assert failure is not None and failure.get("message") == "hung <&>"
    assert suites["simcluster.verify.megatron"].find("testcase/skipped") is not None
    table = summary_table(results, 12.5, suite_seconds(results))
    assert "1 passed, 1 failed, 1 skipped in 12.5s" in table
