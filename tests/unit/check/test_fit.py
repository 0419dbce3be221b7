"""`simcluster check --like/--config`: #SBATCH headers judged against a cluster's spec, one
test per rule, with Slurm 22.05's answers (each was checked against real slurmctld/sbatch
while writing the rules: refused vs pending forever, and the words). Specs are built here
directly, or read from tests/data/check/like/ (production-style slurm.conf files). Also the
seed Enroot script's header, accepted where its partition and account exist and refused
with the right reasons where they do not. Pure logic: no daemon is started."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
from click.testing import CliRunner

from provisioner.check.asks import FeatureSyntax, ask_of, mem_text, parse_constraint, slurm_seconds
from provisioner.check.fit import judge
from provisioner.check.judge import set_option
from provisioner.check.mirror import dry_run_spec, load_target, pick_nodes
from provisioner.check.parse import parse_script
from provisioner.check.rules import apply_edits
from provisioner.cli.main import cli
from provisioner.config.types import AccountSpec, ClusterSpec, NodeSpec, PartitionSpec, QosSpec
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "check"
LIKE = DATA / "like"
ENROOT = DATA / "seeds" / "enroot-prelaunch.sh"


def nodes(prefix: str, count: int, cpus: int, memory: int, gpus: int = 0, gpu_type: Optional[str] = None,
          features: Sequence[str] = (), first: int = 1) -> List[NodeSpec]:
    return [NodeSpec(f"{prefix}{i:02d}", tuple(range(gpus)), cpus, memory, gpu_type=gpu_type if gpus else None,
                     features=tuple(features)) for i in range(first, first + count)]


def cluster(partitions: Sequence[Tuple[str, Sequence[NodeSpec], str, Dict[str, str]]], extra: Sequence[str] = (),
            accounting: bool = False, accounts: Sequence[AccountSpec] = (), qos: Sequence[QosSpec] = ()) -> ClusterSpec:
    """A spec from (name, nodes, MaxTime, options) partitions; the first is the default."""
    all_nodes: Dict[str, NodeSpec] = {}
    parts = []
    for i, (name, members, max_time, options) in enumerate(partitions):
        for n in members:
            all_nodes.setdefault(n.name, n)
        parts.append(PartitionSpec(name, tuple(n.name for n in members), i == 0, max_time, tuple(options.items())))
    return ClusterSpec("prod", "local", tuple(all_nodes.values()), tuple(parts), fake_gpus=True,
                       slurm_conf_extra=tuple(extra), accounting=accounting, accounts=tuple(accounts), qos=tuple(qos))


H100 = nodes("gpu", 4, 112, 1024000, 8, "h100", ("ib", "h100"))
A100 = nodes("a100n", 2, 64, 512000, 4, "a100", ("a100",))
CPU = nodes("cpu", 2, 64, 256000, 0, None, ("icelake",))


def prod(extra: Sequence[str] = (), gpu_options: Optional[Dict[str, str]] = None, **kw) -> ClusterSpec:
    return cluster([("gpu", H100, "2-00:00:00", gpu_options or {"MaxNodes": "2"}),
                    ("a100", A100, "1-00:00:00", {}),
                    ("cpu", CPU, "7-00:00:00", {}),
                    ("mixed", H100[:2] + A100, "1-00:00:00", {})], extra=extra, **kw)


def script(*header: str, body: str = "srun hostname\n", path: str = "job.sbatch"):
    text = "#!/bin/bash\n" + "".join(f"#SBATCH {h}\n" for h in header) + body
    return parse_script(path, text)


def found(spec: ClusterSpec, *header: str, nodes_: Optional[int] = None) -> List[str]:
    """LINE:RULE of each finding (line 2 is the first #SBATCH line)."""
    return [f"{f.line}:{f.rule}" for f in judge(script(*header), spec, nodes=nodes_)]


def one(spec: ClusterSpec, *header: str, nodes_: Optional[int] = None):
    fs = judge(script(*header), spec, nodes=nodes_)
    assert len(fs) == 1, [f.message for f in fs]
    return fs[0]


# ---------------------------------------------------------------- values

@pytest.mark.parametrize("text,seconds", [
    ("60", 3600), ("1:30", 90), ("01:00:00", 3600), ("2-00:00:00", 172800), ("1-12", 129600),
    ("1-00:30", 88200), ("0", 0), ("INFINITE", None), ("UNLIMITED", None)])
def test_slurm_times(text, seconds):
    assert slurm_seconds(text) == seconds


@pytest.mark.parametrize("text", ["1h", "2 days", "", "1-2-3", "abc"])
def test_times_sbatch_does_not_read(text):
    with pytest.raises(ValueError):
        slurm_seconds(text)


@pytest.mark.parametrize("expr,features,ok", [
    ("ib", {"ib"}, True), ("ib&h100", {"ib"}, False), ("ib&h100", {"ib", "h100"}, True),
    ("ib,h100", {"ib", "h100"}, True), ("a100|h100", {"h100"}, True), ("[rack1|rack2]", {"rack2"}, True),
    ("(a|b)&c", {"b", "c"}, True), ("(a|b)&c", {"b"}, False), ("ib*2", {"ib"}, True)])
def test_constraint_expressions(expr, features, ok):
    test, _ = parse_constraint(expr)
    assert test(features) is ok


@pytest.mark.parametrize("expr", ["ib&", "(ib", "ib)", "&", "a||b"])
def test_constraint_syntax_errors(expr):
    with pytest.raises(FeatureSyntax):
        parse_constraint(expr)


@pytest.mark.parametrize("line,key,value,new", [
    ("#SBATCH --time=3-00:00:00", "time", "3-00:00:00", "#SBATCH --time=2-00:00:00"),
    ("#SBATCH --time 3-00:00:00", "time", "3-00:00:00", "#SBATCH --time 2-00:00:00"),
    ("#SBATCH -N 2 -t 3-00:00:00 # long", "time", "3-00:00:00", "#SBATCH -N 2 -t 2-00:00:00 # long"),
    ("#SBATCH -t3-00:00:00", "time", "3-00:00:00", "#SBATCH -t2-00:00:00"),
    ('#SBATCH --partition="admin"', "partition", "admin", '#SBATCH --partition="2-00:00:00"'),
    ("#SBATCH --cpus_per_task=28", "cpus-per-task", "28", "#SBATCH --cpus_per_task=2-00:00:00"),
])
def test_set_option_replaces_the_value_as_written(line, key, value, new):
    from provisioner.check.script import HeaderOpt
    assert set_option(line, HeaderOpt(key, value, 1, line), "2-00:00:00") == new


def test_mem_text():
    assert mem_text(1024000) == "1000G" and mem_text(256000) == "250G" and mem_text(1000) == "1000M"


def test_per_node_amounts_only_where_the_header_fixes_them():
    assert ask_of(script("--ntasks=64", "--cpus-per-task=2")).cpus == 2  # Slurm spreads the tasks
    assert ask_of(script("--nodes=2", "--ntasks=16", "-c 4")).cpus == 32
    assert ask_of(script("--ntasks-per-node=8", "--cpus-per-task=28")).cpus == 224
    g = ask_of(script("--gpus=16")).gpus
    assert g.count == 16 and not g.per_node
    g = ask_of(script("--nodes=2", "--gpus=a100:8")).gpus
    assert (g.type, g.count, g.per_node) == ("a100", 4, True)
    assert ask_of(script("--ntasks-per-node=4", "--gpus-per-task=2")).gpus.count == 8
    assert ask_of(script("--ntasks-per-node=2", "-c 4", "--mem-per-cpu=4G")).mem == 32768
    assert ask_of(script("--gpus-per-node=4", "--mem-per-gpu=100G")).mem == 409600
    assert ask_of(script("--mem=0")).mem is None  # all of a node's memory, whatever it has
    assert ask_of(script('-C "ib&h100"')).constraint.value == "ib&h100"


# ---------------------------------------------------------------- the seed Enroot script

SEED_HEADER = ("--nodes=4", "--gpus-per-node=8", "--ntasks-per-node=8", "--cpus-per-task=28", "--account=itscspod",
               "--partition=admin")


def _seed_mirror(**admin_options) -> ClusterSpec:
    dgx = nodes("dgx", 6, 224, 2000000, 8, "h800", ("ib", "h800"))
    return cluster([("gpu", dgx, "2-00:00:00", {"MaxNodes": "4"}),
                    ("admin", dgx[:4], "INFINITE", dict({"AllowAccounts": "itscspod"}, **admin_options))],
                   accounting=True, accounts=[AccountSpec("itscspod")])


def test_seed_enroot_header_is_accepted_where_its_partition_and_account_exist():
    s = parse_script(str(ENROOT), ENROOT.read_text())
    assert [o.key for o in s.header][:6] == ["nodes", "gpus-per-node", "ntasks-per-node", "cpus-per-task",
                                               "account", "partition"]
    assert judge(s, _seed_mirror()) == []
    assert judge(script(*SEED_HEADER), _seed_mirror()) == []


def test_seed_enroot_header_is_refused_with_slurms_reasons_where_they_do_not():
    h100 = nodes("gpu", 128, 112, 1000000, 8, "h100", ("ib",), first=1)
    other = cluster([("gpu", h100, "2-00:00:00", {"AllowAccounts": "proj,research"}),
                     ("debug", h100[:2], "00:30:00", {})], extra=["EnforcePartLimits=ALL"], accounting=True)
    fs = judge(parse_script(str(ENROOT), ENROOT.read_text()), other)
    by_rule = {f.rule: f for f in fs}
    assert sorted(by_rule) == ["cluster.account", "cluster.cpus-per-node", "cluster.partition"]
    part = by_rule["cluster.partition"]
    assert part.line == 9 and '"Invalid partition name specified"' in part.message
    assert part.fix.startswith("#SBATCH --partition=gpu") and "gpu (default), debug" in part.fix
    acct = by_rule["cluster.account"]
    assert acct.line == 8 and '"Invalid account or account/partition combination specified"' in acct.message
    assert "proj, research" in acct.message and acct.fix.startswith("#SBATCH --account=proj")
    cpus = by_rule["cluster.cpus-per-node"]
    assert cpus.line == 7 and "224 CPUs per node" in cpus.message and "at most 112" in cpus.message
    assert '"Requested node configuration is not available"' in cpus.message
    assert cpus.fix.startswith("#SBATCH --cpus-per-task=14") and "128 x (112 CPUs, 1000000M, gpu:h100:8" in cpus.fix


def test_seed_header_on_the_like_conf_with_an_admin_partition_and_without():
    """The same, read from production-style slurm.conf files by the like reader."""
    s = parse_script(str(ENROOT), ENROOT.read_text())
    good = load_target(str(LIKE / "prod" / "slurm.conf"), None, None)
    assert [p.name for p in good.spec.partitions] == ["admin", "gpu", "cpu"]
    assert good.spec.node("dgx01").gpu_type == "h800" and len(good.spec.node("dgx01").gpus) == 8
    assert judge(s, good.spec) == []
    bad = load_target(str(LIKE / "other" / "slurm.conf"), None, None)
    assert len(bad.spec.nodes) == 128 and sum(len(n.gpus) for n in bad.spec.nodes) == 1024  # every node counts
    assert sorted(f.rule for f in judge(s, bad.spec)) == ["cluster.account", "cluster.cpus-per-node",
                                                          "cluster.partition"]


# ---------------------------------------------------------------- one test per rule

def test_partition_that_does_not_exist_is_refused_and_the_fix_names_one_that_takes_the_rest():
    f = one(prod(), "--partition=gpux", "--gres=gpu:a100:2")
    assert f.rule == "cluster.partition" and f.line == 2 and f.severity == "error"
    assert 'sbatch refuses the job: "Invalid partition name specified"' in f.message
    assert f.fix.startswith("#SBATCH --partition=a100 ") and "a100 takes the rest of this header" in f.fix
    # one bad name in a list is enough for Slurm to refuse
    assert found(prod(), "-p gpu,nope") == ["2:cluster.partition"]


def test_no_partition_is_judged_in_the_default_one():
    assert found(prod(), "--time=3-00:00:00") == ["2:cluster.time-limit"]
    assert found(prod(), "--time=3-00:00:00", "-p cpu") == []


def test_time_above_maxtime_is_pending_forever_by_default_and_refused_with_enforce():
    f = one(prod(), "-p gpu", "--time=2-00:00:01")  # 2 days and a minute once rounded up
    assert f.rule == "cluster.time-limit" and f.line == 3
    assert "MaxTime=2-00:00:00" in f.message and "stays pending forever (Reason=PartitionConfig, then PartitionTimeLimit" in f.message
    assert f.fix.startswith("#SBATCH --time=2-00:00:00") and "allows at most 2-00:00:00" in f.fix
    f = one(prod(extra=["EnforcePartLimits=ALL"]), "-p gpu", "--time=72:00:00")
    assert ('sbatch refuses the job: "Requested time limit is invalid (missing or exceeds some limit)" '
            "(EnforcePartLimits=ALL)") in f.message
    assert "EnforcePartLimits=ANY" in one(prod(extra=["EnforcePartLimits=YES"]), "-t 3000").message
    assert found(prod(), "-p gpu", "--time=2-00:00:00") == []
    assert found(prod(), "-p gpu", "--time=48:00:00") == []


def test_time_sbatch_cannot_read():
    f = one(prod(), "--time=2days")
    assert f.rule == "cluster.time-limit" and "Invalid --time specification" in f.message


def test_qos_with_partition_time_limit_flag_lifts_maxtime():
    spec = prod(accounting=True, qos=[QosSpec("long", flags=("PartitionTimeLimit",))])
    assert found(spec, "--time=5-00:00:00", "--qos=long") == []
    assert found(spec, "--time=5-00:00:00") == ["2:cluster.time-limit"]


def test_node_counts_against_the_partition():
    f = one(prod(), "-p gpu", "--nodes=3")
    assert f.rule == "cluster.nodes" and "above partition gpu's MaxNodes=2" in f.message
    assert "then PartitionNodeLimit" in f.message and f.fix.startswith("#SBATCH --nodes=2")
    f = one(prod(extra=["EnforcePartLimits=ALL"]), "-p cpu", "-N 3")
    assert "more nodes than partition cpu has (2)" in f.message and '"Node count specification invalid"' in f.message
    assert f.fix.startswith("#SBATCH -N 2")
    assert found(prod(), "-p gpu", "--nodes=1-3") == ["3:cluster.nodes"]  # the range's end against MaxNodes
    spec = prod(gpu_options={"MinNodes": "2"})
    assert "below partition gpu's MinNodes=2" in one(spec, "-p gpu", "-N 1").message
    assert found(prod(), "-p gpu", "--nodes=2") == []


def test_node_count_given_at_submission():
    f = one(prod(), "-p cpu", nodes_=4)
    assert f.rule == "cluster.nodes" and "--nodes=4 (given at submission)" in f.message


def test_gpu_type_no_node_of_the_partition_has():
    f = one(prod(), "-p gpu", "--gres=gpu:a100:2")
    assert f.rule == "cluster.gpu-type" and f.line == 3
    assert "no node of partition gpu has GPU type a100 (gpu:a100 nodes are in partitions a100, mixed)" in f.message
    assert '"Requested node configuration is not available"' in f.message
    assert f.fix.startswith("#SBATCH --gres=gpu:h100:2")
    f = one(prod(), "-p gpu", "--gpus=v100:1")
    assert "GPU type v100 and no node of this cluster has" in f.message and f.fix.startswith("#SBATCH --gpus=h100:1")
    assert found(prod(), "-p gpu", "--gpus-per-node=h100:8") == []
    assert found(prod(), "-p mixed", "--gpus-per-node=H100:8") == []  # types compare in any case
    assert "it has no GPUs" in one(prod(), "-p cpu", "--gres=gpu:h100:1").message


def test_more_gpus_per_node_than_any_node_has():
    f = one(prod(), "-p a100", "--gres=gpu:a100:8")
    assert f.rule == "cluster.gpus-per-node" and "partition a100's nodes have at most 4" in f.message
    assert f.fix.startswith("#SBATCH --gres=gpu:a100:4")
    f = one(prod(), "-p gpu", "--ntasks-per-node=4", "--gpus-per-task=4")
    assert f.rule == "cluster.gpus-per-node" and "16 GPUs per node" in f.message and f.line == 4
    # --gpus over the whole job without a node count: the partition's GPUs on at most MaxNodes nodes
    assert found(prod(), "-p gpu", "--gpus=16") == []
    assert found(prod(), "-p gpu", "--gpus=24") == ["3:cluster.gpus-per-node"]


def test_features_by_slurms_two_answers():
    f = one(prod(), "-p gpu", "-C nvme")
    assert f.rule == "cluster.feature" and '"Invalid feature specification"' in f.message
    assert "features in partition gpu: h100, ib" in f.fix
    f = one(prod(), "-p gpu", "--constraint=icelake")  # exists, on other nodes
    assert "no node of partition gpu has this feature" in f.message and "not available" in f.message
    assert found(prod(), "-p gpu", '-C "ib&h100"') == []
    assert found(prod(), "-p mixed", "--constraint=[a100|h100]") == []
    assert found(prod(), "-p gpu", "-C ib&") == ["3:cluster.feature"]


def test_cpus_and_memory_per_node():
    f = one(prod(), "-p gpu", "--ntasks-per-node=8", "--cpus-per-task=16")
    assert f.rule == "cluster.cpus-per-node" and f.line == 4 and "128 CPUs per node" in f.message
    assert f.fix.startswith("#SBATCH --cpus-per-task=14")
    assert found(prod(), "-p gpu", "--ntasks=64", "--cpus-per-task=2") == []  # spread over nodes
    f = one(prod(), "-p cpu", "--mem=300G")
    assert f.rule == "cluster.memory-per-node" and "at most 250G (RealMemory=256000)" in f.message
    assert '"Memory specification can not be satisfied"' in f.message and f.fix.startswith("#SBATCH --mem=250G")
    f = one(prod(), "-p cpu", "-c 64", "--mem-per-cpu=8G")
    assert f.rule == "cluster.memory-per-node" and f.fix.startswith("#SBATCH --mem-per-cpu=4000M")
    f = one(prod(), "-p a100", "--gpus-per-node=4", "--mem-per-gpu=200G")
    assert f.fix.startswith("#SBATCH --mem-per-gpu=125G")
    assert found(prod(), "-p cpu", "--mem=0") == []


def test_requests_each_on_some_node_but_not_together():
    f = one(prod(), "-p mixed", "--gres=gpu:a100:2", "-C ib")
    assert f.rule == "cluster.node-config" and "no node of partition mixed has all of 2 x gpu:a100, features ib" \
        in f.message
    f = one(prod(), "-p mixed", "-N 3", "--gres=gpu:h100:8")
    assert f.rule == "cluster.node-config" and "partition mixed has 2 such nodes" in f.message
    assert f.fix.startswith("#SBATCH -N 2")


def test_other_gres_names():
    f = one(prod(), "--gres=gpu:h100:1,nvme:1")
    assert f.rule == "cluster.gres" and '"Invalid generic resource (gres) specification"' in f.message


def test_accounts_allowed_and_denied():
    spec = prod(gpu_options={"AllowAccounts": "proj,research"})
    f = one(spec, "-p gpu", "-A other")
    assert f.rule == "cluster.account" and "allows accounts proj, research" in f.message
    assert "Job's account not permitted to use this partition (gpu allows proj,research not other)" in f.message
    assert f.fix.startswith("#SBATCH -A proj")
    assert found(spec, "-p gpu", "--account=PROJ") == []
    w = one(spec, "-p gpu")
    assert w.severity == "warning" and "default account" in w.message
    assert w.edits and w.edits[0].text == "#SBATCH --account=proj" and "insert before line 3" in w.fix
    spec = prod(gpu_options={"DenyAccounts": "guests"}, extra=["EnforcePartLimits=ANY"])
    f = one(spec, "-p gpu", "-A guests")
    assert "denies accounts guests" in f.message and "Invalid account or account/partition" in f.message
    assert found(spec, "-p gpu", "-A proj") == []


def test_accounts_the_database_does_not_have():
    spec = prod(accounting=True, accounts=[AccountSpec("proj")], extra=["AccountingStorageEnforce=associations"])
    f = one(spec, "-A nope")
    assert f.rule == "cluster.account" and f.severity == "error" and f.fix.startswith("#SBATCH -A proj")
    # not enforced: Slurm runs the job under the user's default account (checked on 22.05: the
    # job then waits for the partition's AllowAccounts if that account is not among them)
    w = one(prod(accounting=True, accounts=[AccountSpec("proj")], gpu_options={"AllowAccounts": "proj"}), "-A nope")
    assert w.severity == "warning" and "under your default account instead" in w.message
    assert "allows only proj" in w.message
    # the database is looked at before the partition: an unknown account is refused even where
    # the partition would not allow it anyway
    spec = prod(accounting=True, accounts=[AccountSpec("proj")], gpu_options={"AllowAccounts": "proj"},
                extra=["AccountingStorageEnforce=limits"])
    assert '"Invalid account or account/partition combination specified"' in one(spec, "-A nope").message


def test_licenses():
    spec = prod(extra=["Licenses=matlab:4,ansys:2"])
    f = one(spec, "-L matlab:5")
    assert f.rule == "cluster.license" and '"Invalid license specification"' in f.message
    assert "5 matlab licenses asked, the cluster has 4" in f.message and "matlab:4, ansys:2" in f.fix
    assert "no license comsol" in one(spec, "--licenses=comsol").message
    assert found(spec, "--licenses=matlab:2,ansys") == []


def test_qos_defined_allowed_and_per_account():
    spec = prod(accounting=True, qos=[QosSpec("high")], extra=["AccountingStorageEnforce=associations,qos"])
    f = one(spec, "--qos=urgent")
    assert f.rule == "cluster.qos" and f.severity == "error" and '"Invalid qos specification"' in f.message
    assert "QoS here: high, normal" in f.fix
    w = one(prod(accounting=True, qos=[QosSpec("high")]), "-q urgent")
    assert w.severity == "warning" and "gives it no QoS" in w.message
    spec = prod(gpu_options={"AllowQos": "high"}, accounting=True, qos=[QosSpec("high"), QosSpec("low")],
                extra=["EnforcePartLimits=ALL"])
    f = one(spec, "-p gpu", "-q low")
    assert "allows QoS high (AllowQos)" in f.message and '"Invalid qos specification"' in f.message
    assert one(spec, "-p gpu").severity == "warning"  # normal, the usual default, is not allowed
    assert found(spec, "-p gpu", "-q high") == []
    spec = prod(accounting=True, qos=[QosSpec("high"), QosSpec("low")],
                accounts=[AccountSpec("proj", qos=("normal", "low"))], extra=["AccountingStorageEnforce=qos"])
    f = one(spec, "-A proj", "-q high")
    assert "account proj may use QoS normal, low only" in f.message


def test_several_partitions_fit_when_one_takes_the_job():
    assert found(prod(), "-p cpu,gpu", "--gres=gpu:h100:8") == []
    fs = judge(script("-p cpu,a100", "--gres=gpu:h100:8"), prod())
    assert {f.rule for f in fs} == {"cluster.gpu-type"} and len(fs) == 2
    assert any("partition cpu" in f.message for f in fs) and any("partition a100" in f.message for f in fs)
    # the partition that takes the job may still have something to say (a warning), the other nothing
    spec = prod(gpu_options={"AllowAccounts": "proj"})
    assert [(f.rule, f.severity) for f in judge(script("-p cpu,gpu", "--gres=gpu:h100:1"), spec)] == [
        ("cluster.account", "warning")]


def test_every_fix_with_edits_removes_its_finding():
    """Apply each finding's edits and judge again: that finding is gone."""
    cases = [(prod(), ("-p gpu", "--time=3-00:00:00")), (prod(), ("-p gpu", "-N 3")),
             (prod(), ("-p gpu", "--gres=gpu:a100:2")), (prod(), ("-p a100", "--gres=gpu:a100:8")),
             (prod(), ("-p gpu", "--ntasks-per-node=8", "--cpus-per-task=16")), (prod(), ("-p cpu", "--mem=300G")),
             (prod(), ("-p gpux",)), (prod(gpu_options={"AllowAccounts": "proj"}), ("-p gpu", "-A x")),
             (prod(gpu_options={"AllowAccounts": "proj"}), ("-p gpu",))]
    for spec, header in cases:
        s = script(*header)
        for f in judge(s, spec):
            assert f.edits, f.message
            text = apply_edits({s.path: s.text}, f.edits)[s.path]
            again = judge(parse_script(s.path, text), spec)
            assert not [g for g in again if g.rule == f.rule], (header, f.fix, [g.message for g in again])


# ---------------------------------------------------------------- the dry run's copy

def test_dry_run_copy_of_a_large_cluster_keeps_shapes_and_the_jobs_nodes():
    big = nodes("gpu", 100, 112, 1000000, 8, "h100", ("ib",))
    cpus = nodes("cpu", 30, 64, 256000)
    spec = cluster([("gpu", big, "2-00:00:00", {}), ("cpu", cpus, "INFINITE", {}),
                    ("all", big + cpus, "1:00:00", {})])
    ask = ask_of(script("-p gpu", "-N 4", "--gres=gpu:h100:8"))
    from provisioner.check.fit import fits_node
    copy = dry_run_spec(spec, "chk-abc123", ["gpu"], 4, 64, fits=lambda n: fits_node(ask, n))
    names = [n.name for n in copy.nodes]
    assert names == ["gpu01", "gpu02", "gpu03", "gpu04", "cpu01"]
    assert [p.name for p in copy.partitions] == ["gpu", "cpu", "all"] and copy.partitions[0].default
    assert [g for n in copy.nodes for g in n.gpus] == list(range(32))  # renumbered from 0
    assert copy.name == "chk-abc123" and copy.fake_gpus and all(n.port is None for n in copy.nodes)
    # at most 256 fake GPUs even where the job asks for more nodes
    many = pick_nodes(spec, ["gpu"], 64, 64)
    assert sum(len(spec.node(n).gpus) for n in many) <= 256


def test_small_cluster_is_copied_whole():
    copy = dry_run_spec(prod(), "chk-1", ["gpu"], 1, 64)
    assert [n.name for n in copy.nodes] == [n.name for n in prod().nodes]


# ---------------------------------------------------------------- the command

def _cli(args, **kw):
    return CliRunner().invoke(cli, ["check", "--no-shellcheck"] + args, **kw)


def test_cli_config_and_json(tmp_path):
    job = tmp_path / "job.sbatch"
    job.write_text("#!/bin/bash\n#SBATCH -p gpu\n#SBATCH --time=3-00:00:00\n#SBATCH --gres=gpu:h100:2\n"
                   "#SBATCH -A ml\nsrun hostname\n")
    example = str(REPO / "configs" / "examples" / "gpu-cluster.yaml")
    res = _cli(["--config", example, str(job)])
    assert res.exit_code == 1, res.output
    assert f"{job}:3: error: --time=3-00:00:00 is above partition gpu's MaxTime=2-00:00:00" in res.output
    assert "(judged against " in res.output.splitlines()[-1]
    res = _cli(["--config", example, "--json", str(job)])
    data = json.loads(res.output)
    assert data["cluster"]["source"] == example and data["cluster"]["partitions"] == ["gpu", "cpu", "debug"]
    [f] = data["findings"]
    assert f["rule"] == "cluster.time-limit" and f["source"] == "cluster" and f["edits"][0]["start"] == 3
    job.write_text(job.read_text().replace("3-00:00:00", "1-00:00:00"))
    res = _cli(["-c", example, str(job)])
    assert res.exit_code == 0 and "the header fits " in res.output


def test_cli_like(tmp_path):
    res = _cli(["--like", str(LIKE / "other" / "slurm.conf"), str(ENROOT)])
    assert res.exit_code == 1 and "[cluster.partition]" in res.output
    res = _cli(["--like", str(LIKE / "prod" / "slurm.conf"), "--gres-conf", str(LIKE / "prod" / "gres.conf"),
                str(ENROOT)])
    assert res.exit_code == 0 and "the header fits " in res.output


@pytest.mark.parametrize("args,words", [
    (["--like", "a.conf", "--config", "b.yaml"], "give one"),
    (["--gres-conf", "g.conf"], "--gres-conf only goes with --like"),
    (["--config", "/nonexistent.yaml"], "does not exist"),
])
def test_cli_bad_cluster_options_are_one_line(args, words):
    res = CliRunner().invoke(cli, ["check"] + args + [str(ENROOT)])
    assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output


# ---------------------------------------------------------------- the like corpus

LIKE_CORPUS = REPO / "tests" / "data" / "like"
LIKE_CASES = sorted(p.parent.name for p in LIKE_CORPUS.glob("*/expect.yaml"))


def _header(args: str):
    return parse_script("job.sbatch", f"#!/bin/bash\n#SBATCH {args}\nsrun hostname\n")


@pytest.mark.parametrize("case", LIKE_CASES or ["(no corpus)"])
def test_like_corpus_headers_judged_against_the_whole_production_conf(case):
    """`up --like`'s corpus says which headers each production conf takes (run for real on its
    mirror by tests/integration/test_like.py) and which it refuses, with part of sbatch's answer.
    Judged against every node of the conf: an accepted header has no error; a refused one has a
    finding with that answer, or says the job waits forever (EnforcePartLimits=NO) or depends on
    the account the user's default is. A refusal that comes from the mirror's --max-nodes
    subset (more nodes than it keeps) is no refusal in production."""
    import yaml
    if case == "(no corpus)":
        pytest.skip("tests/data/like is not there")
    expect = yaml.safe_load((LIKE_CORPUS / case / "expect.yaml").read_text())
    spec = load_target(str(LIKE_CORPUS / case / "slurm.conf"), None, None).spec
    for args in expect.get("accepted", []):
        errors = [f.message for f in judge(_header(args), spec) if f.severity == "error"]
        assert errors == [], (case, args)
    for refused in expect.get("refused", []):
        ask = ask_of(_header(refused["args"]))
        if ask.nodes_given and expect.get("maxNodes") and ask.nodes_min > expect["maxNodes"]:
            continue
        fs = judge(_header(refused["args"]), spec)
        assert fs, (case, refused)
        if not any(refused["says"] in f.message for f in fs):
            assert all("pending forever" in f.message or f.severity == "warning" for f in fs), (case, refused)
