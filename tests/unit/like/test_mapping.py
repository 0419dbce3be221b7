"""A production conf's nodes, partitions and settings mapped to the spec's keys."""

from __future__ import annotations

import dataclasses

import pytest

from provisioner.config import load_spec
from provisioner.like import LikeError
from tests.conftest import REPO
from tests.unit.like.conftest import dropped, kept
from tests.unit.conftest import spec_from

SEED = ("# Enable multiple slurmd support\n"
        "NodeName=node6 NodeHostname=moirai-h200 Port=17016 \\\n"
        "    CPUs=112 RealMemory=240000 Gres=gpu:1 State=UNKNOWN\n\n"
        "NodeName=node7 NodeHostname=moirai-h200 Port=17017 \\\n"
        "    CPUs=112 RealMemory=240000 Gres=gpu:1 State=UNKNOWN\n")
SEED_GRES = "NodeName=node6 Name=gpu File=/dev/nvidia6\nNodeName=node7 Name=gpu File=/dev/nvidia7\n"


# ------------------------------------------------------------------ the seed fragment

@pytest.mark.parametrize("gpus, fake", [(None, True), ([6, 7], False)])
def test_the_seed_fragment_is_the_seed_cluster(mirror_of, gpus, fake):
    m = mirror_of(SEED, gres=SEED_GRES, gpus=gpus)
    ours = load_spec(None, {"name": "node6-node7"}, cpus=2, memory_mb=2000, base=m.raw)
    example = load_spec(str(REPO / "configs/examples/node6-node7-one-gpu-each.yaml"),
                        {"fakeGpus": True} if fake else None, cpus=2, memory_mb=2000)
    assert ours == example
    assert [n.gpus for n in ours.nodes] == [(6,), (7,)] and [n.port for n in ours.nodes] == [17016, 17017]
    assert ours.fake_gpus is fake


def test_the_seed_fragment_with_other_host_gpus_gets_those(spec_of):
    spec = spec_of(SEED, gres=SEED_GRES, gpus=[0, 1])
    assert [n.gpus for n in spec.nodes] == [(0,), (1,)] and not spec.fake_gpus


def test_without_gres_conf_fake_gpus_are_numbered_from_0(spec_of):
    spec = spec_of(SEED)
    assert [n.gpus for n in spec.nodes] == [(0,), (1,)] and spec.fake_gpus


def test_too_few_host_gpus_is_one_clear_error(mirror_of):
    with pytest.raises(LikeError, match="the mirrored nodes have 2 GPUs, --gpus gives 1") as err:
        mirror_of(SEED, gpus=[3])
    assert "--max-nodes" in err.value.hint and "leave --gpus out" in err.value.hint


# ---------------------------------------------------------------------------- nodes

def test_default_lines_apply_to_the_lines_after_them(spec_of):
    spec = spec_of("NodeName=DEFAULT CPUs=64 RealMemory=256000 Features=ib\n"
                   "NodeName=a[1-2]\n"
                   "NodeName=DEFAULT CPUs=32\n"
                   "NodeName=b1 Features=ib,nvme\n")
    assert [(n.name, n.cpus, n.memory, n.features) for n in spec.nodes] == [
        ("a1", 64, 256000, ("ib",)), ("a2", 64, 256000, ("ib",)), ("b1", 32, 256000, ("ib", "nvme"))]


def test_cpus_from_sockets_cores_threads_and_the_topology_kept(spec_of):
    spec = spec_of("NodeName=n1 Sockets=2 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=1000\n"
                   "NodeName=n2 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2\n"
                   "NodeName=n3 Procs=12 Weight=5 TmpDisk=100\n")
    assert [n.cpus for n in spec.nodes] == [64, 224, 12]
    assert spec.nodes[0].options == (("Sockets", "2"), ("CoresPerSocket", "16"), ("ThreadsPerCore", "2"))
    assert dict(spec.nodes[2].options) == {"Weight": "5", "TmpDisk": "100"}


def test_a_node_without_cpus_or_memory_gets_the_hosts(spec_of):
    spec = spec_of("NodeName=n1\n")
    assert (spec.nodes[0].cpus, spec.nodes[0].memory) == (4, 8000)  # tests.unit.conftest's host


@pytest.mark.parametrize("gres, count, gpu_type", [
    ("gpu:h100:8", 8, "h100"),
    ("gpu:8", 8, None),
    ("gpu:a100:4(S:0-1)", 4, "a100"),
    ("gpu:1g.10gb:7", 1, "h100"),  # MIG: one GPU cut into seven 1g.10gb instances (test_like_mig.py)
    ("gpu:h100", 1, "h100"),
    ("gpu", 1, None),
])
def test_gres_counts_and_types(spec_of, gres, count, gpu_type):
    node = spec_of(f"NodeName=n1 Gres={gres}\n").nodes[0]
    assert (len(node.gpus), node.gpu_type) == (count, gpu_type)


def test_other_gres_and_a_second_gpu_type_are_reported(mirror_of):
    m = mirror_of("NodeName=n1 Gres=gpu:a100:2,nvme:1,gpu:v100:2\n")
    node = spec_from(m.raw).nodes[0]
    assert (len(node.gpus), node.gpu_type) == (2, "a100")
    reasons = [e.why for e in m.report.dropped if e.key == "Gres"]
    assert any("GPUs only" in r for r in reasons) and any("one GPU type per node" in r for r in reasons)


def test_gres_conf_types_untyped_gpus_and_gives_device_numbers(spec_of):
    spec = spec_of("NodeName=ws[01-02] Gres=gpu:2\n",
                   gres="NodeName=ws01 Name=gpu Type=rtx3090 File=/dev/nvidia[2-3]\n"
                        "NodeName=ws02 Name=gpu Type=rtx3090 File=/dev/nvidia[4-5]\n")
    assert [(n.gpu_type, n.gpus) for n in spec.nodes] == [("rtx3090", (2, 3)), ("rtx3090", (4, 5))]


def test_gres_conf_same_devices_on_every_node_are_renumbered(spec_of):
    spec = spec_of("NodeName=g[1-2] Gres=gpu:h100:2\n", gres="NodeName=g[1-2] Name=gpu Type=h100 File=/dev/nvidia[0-1]\n")
    assert [n.gpus for n in spec.nodes] == [(0, 1), (2, 3)]


def test_gres_conf_autodetect_leaves_counts_to_slurm_conf(mirror_of):
    m = mirror_of("NodeName=g1 Gres=gpu:h100:4\n", gres="AutoDetect=nvml\nName=mps Count=100\n")
    node = spec_from(m.raw).nodes[0]
    assert (len(node.gpus), node.gpu_type) == (4, "h100")
    # mps counts are slurm.conf's Gres= (none here): gres.conf's mps line adds none.
    assert node.mps == 0 and "gres.conf Name" not in dropped(m)


def test_a_gres_conf_given_elsewhere(tmp_path, mirror_of):
    other = tmp_path / "elsewhere.gres"
    other.write_text("Name=gpu Type=l40s File=/dev/nvidia[0-1]\n")
    m = mirror_of("NodeName=g1 Gres=gpu:2\n", gres_conf=str(other))
    assert m.raw["nodes"][0]["gpuType"] == "l40s"
    with pytest.raises(LikeError, match="gres.conf .*nope does not exist"):
        mirror_of("NodeName=g1\n", gres_conf=str(tmp_path / "nope"))


def test_features_any_spelling_and_bad_ones_reported(mirror_of):
    m = mirror_of('NodeName=n1 Feature="ib, nvme"\nNodeName=n2 Features=location=local,ib\n')
    spec = spec_from(m.raw)
    assert [n.features for n in spec.nodes] == [("ib", "nvme"), ("ib",)]
    assert "not a feature name" in dropped(m)["Features"]


def test_ports_per_node_kept_a_shared_port_dropped(mirror_of):
    m = mirror_of("NodeName=a1 Port=17016\nNodeName=b[1-2] Port=[17020-17021]\nNodeName=c[1-2] Port=6818\n")
    assert [n.get("port") for n in m.raw["nodes"]] == [17016, 17020, 17021, None, None]
    assert "one port for 2 nodes" in dropped(m)["Port"]


def test_state_future_nodes_are_left_out(spec_of):
    spec = spec_of("NodeName=n[1-2]\nNodeName=later[1-2] State=FUTURE\nPartitionName=p Nodes=n[1-2],later[1-2]\n")
    assert [n.name for n in spec.nodes] == ["n1", "n2"] and spec.partitions[0].nodes == ("n1", "n2")


def test_dropped_node_options_say_why(mirror_of):
    m = mirror_of("NodeName=n1 NodeAddr=10.0.0.1 NodeHostname=h1 State=UNKNOWN CoreSpecCount=2 Frob=1\n")
    d = dropped(m)
    assert d["NodeAddr"] == d["NodeHostname"] == "one machine runs every daemon here"
    assert "every node starts idle" in d["State"]
    assert "specialization" in d["CoreSpecCount"]
    assert d["Frob"] == "unknown NodeName option, kept out"


# ----------------------------------------------------------------------- partitions

def test_partitions_defaults_hostlists_all_and_options(spec_of):
    spec = spec_of("NodeName=g[1-2],c1\n"
                   "PartitionName=DEFAULT State=UP MaxTime=1-00:00:00 DefaultTime=01:00:00\n"
                   "PartitionName=gpu Nodes=g[1-2] Default=YES PriorityTier=10 Shared=NO\n"
                   "PartitionName=debug Nodes=g1,c1 MaxTime=00:30:00 MaxNodes=2\n"
                   "PartitionName=all Nodes=ALL MaxTime=infinite State=DOWN\n")
    gpu, debug, every = spec.partitions
    assert (gpu.nodes, gpu.default, gpu.max_time) == (("g1", "g2"), True, "1-00:00:00")
    assert dict(gpu.options) == {"DefaultTime": "01:00:00", "PriorityTier": "10", "OverSubscribe": "NO"}
    assert (debug.nodes, debug.max_time, debug.option("maxnodes")) == (("g1", "c1"), "00:30:00", "2")
    assert (every.nodes, every.max_time, every.option("State")) == (("g1", "g2", "c1"), "INFINITE", "DOWN")


def test_node_sets_by_name_and_by_feature(spec_of):
    spec = spec_of("NodeName=a[1-2] Features=a100\nNodeName=h1 Features=h100\n"
                   "NodeSet=anodes Feature=a100\nNodeSet=hnodes Nodes=h1\n"
                   "PartitionName=gpu Nodes=anodes,hnodes\n")
    assert spec.partitions[0].nodes == ("a1", "a2", "h1")


def test_allow_groups_and_alloc_nodes_are_dropped_with_a_reason(mirror_of):
    m = mirror_of("NodeName=n1\nPartitionName=p Nodes=n1 AllowGroups=hpc AllocNodes=login1 Weird=1\n")
    d = dropped(m)
    assert "Unix groups" in d["AllowGroups"] and "login nodes" in d["AllocNodes"]
    assert d["Weird"] == "unknown PartitionName option, kept out"


def test_a_conf_without_partitions_gets_gpu_or_main(spec_of):
    assert [(p.name, p.default, p.max_time) for p in spec_of("NodeName=n1 Gres=gpu:1\n").partitions] == [
        ("gpu", True, "INFINITE")]
    assert spec_of("NodeName=n1\n").partitions[0].name == "main"


def test_several_defaults_the_last_wins_and_none_is_noted(mirror_of):
    m = mirror_of("NodeName=n1\nPartitionName=a Nodes=n1 Default=YES\nPartitionName=b Nodes=n1 Default=YES\n")
    assert [p["default"] for p in m.raw["partitions"]] == [False, True]
    m = mirror_of("NodeName=n1\nPartitionName=a Nodes=n1\n")
    assert any("no partition says Default=YES" in n for n in m.report.notes)


def test_a_partition_without_nodes_is_dropped(mirror_of):
    m = mirror_of("NodeName=n1\nPartitionName=empty\nPartitionName=p Nodes=n1\n")
    assert [p["name"] for p in m.raw["partitions"]] == ["p"]


# ------------------------------------------------------------------------- accounting

def test_accounts_and_qos_the_partitions_name_exist(spec_of):
    spec = spec_of("NodeName=n1\n"
                   "PartitionName=a Nodes=n1 AllowAccounts=proj,ML,root AllowQos=normal,high,low\n"
                   "PartitionName=b Nodes=n1 QOS=urgent DenyAccounts=guests AllowQos=ALL\n")
    assert spec.accounting
    assert [a.name for a in spec.accounts] == ["proj", "ml", "guests"]
    assert [q.name for q in spec.qos] == ["high", "low", "urgent"]
    assert spec.partitions[1].option("AllowQos") is None  # ALL is Slurm's default


def test_slurmdbd_turns_accounting_on_and_keeps_its_settings(mirror_of):
    m = mirror_of("AccountingStorageEnforce=associations,limits\nAccountingStorageType=accounting_storage/slurmdbd\n"
                  "AccountingStorageTRES=gres/gpu,gres/nvme,cpu\nNodeName=n1\n")
    assert m.raw["accounting"] is True
    assert m.raw["slurmConf"] == ["AccountingStorageEnforce=associations,limits", "AccountingStorageTRES=gres/gpu,cpu"]
    assert "GPUs only" in dropped(m)["AccountingStorageTRES"]


def test_accounting_settings_without_slurmdbd_are_dropped(mirror_of):
    m = mirror_of("AccountingStorageType=accounting_storage/none\nAccountingStorageEnforce=limits\nNodeName=n1\n")
    assert "accounting" not in m.raw and "slurmConf" not in m.raw
    assert "needs slurmdbd" in dropped(m)["AccountingStorageEnforce"]


# ---------------------------------------------------------------------------- globals

def test_settings_jobs_see_become_slurm_conf_lines(mirror_of):
    m = mirror_of("SelectType=select/cons_tres\nselecttypeparameters=CR_Core_Memory\nPreemptType=preempt/qos\n"
                  "PreemptMode=REQUEUE\nPriorityWeightAge=100\nDefMemPerCPU=2000\nDefMemPerCPU=4000\n"
                  'SchedulerParameters="bf_continue, bf_window=10"\nLicenses=matlab:4\nNodeName=n1\n')
    assert m.raw["slurmConf"] == ["SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
                                  "PreemptType=preempt/qos", "PreemptMode=REQUEUE", "PriorityWeightAge=100",
                                  "DefMemPerCPU=4000", "SchedulerParameters=bf_continue,bf_window=10",
                                  "Licenses=matlab:4"]
    spec_from(m.raw)  # and the spec takes them


@pytest.mark.parametrize("line, key, says", [
    ("SlurmctldHost=ctl(10.0.0.1)", "SlurmctldHost", "one machine"),
    ("ControlMachine=ctl", "ControlMachine", "one machine"),
    ("StateSaveLocation=/var/spool", "StateSaveLocation", "path"),
    ("SlurmctldPort=6817", "SlurmctldPort", "ports"),
    ("AuthType=auth/munge", "AuthType", "munge"),
    ("Prolog=/etc/slurm/prolog.sh", "Prolog", "script"),
    ("TopologyPlugin=topology/tree", "TopologyPlugin", "topology"),
    ("ProctrackType=proctrack/cgroup", "ProctrackType", "machine decides"),
    ("JobSubmitPlugins=lua", "JobSubmitPlugins", "out of scope"),
    ("HealthCheckProgram=/usr/sbin/nhc", "HealthCheckProgram", "runs no health check"),
    ("JobCompType=jobcomp/elasticsearch", "JobCompType", "job completion"),
    ("ClusterName=prod", "ClusterName", "--name"),
    ("SlurmdTimeout=300", "SlurmdTimeout", "timeouts"),
    ("PlugStackConfig=/etc/slurm/plugstack.conf", "PlugStackConfig", "SPANK"),
    ("SelectType=select/cray_aries", "SelectType", "not a plugin of this Slurm"),
    ("PrioritySiteFactorPlugin=site_factor/x", "PrioritySiteFactorPlugin", "site's own"),
    ("FooBar=1", "FooBar", "unknown key, kept out"),
])
def test_what_cannot_apply_here_is_dropped_with_a_reason(mirror_of, line, key, says):
    m = mirror_of(f"{line}\nNodeName=n1\n")
    assert says in dropped(m)[key]
    assert "slurmConf" not in m.raw


def test_list_values_keep_what_can_apply(mirror_of):
    m = mirror_of("PrologFlags=Alloc,Contain,X11\nLaunchParameters=enable_nss_slurm\nGresTypes=gpu,nic\nNodeName=n1\n")
    assert m.raw["slurmConf"] == ["PrologFlags=Alloc,Contain"]
    assert {"PrologFlags", "LaunchParameters", "GresTypes"} <= set(dropped(m))
    assert "GresTypes" in kept(m)


# ---------------------------------------------------------------------- bad input

@pytest.mark.parametrize("text, says", [
    ("NodeName=n1\nNodeName= CPUs=8\n", "slurm.conf:2: NodeName line has no name"),
    ("NodeName=n1\nPartitionName= Nodes=n1\n", "slurm.conf:2: PartitionName line has no name"),
    ("NodeName=n[1-\n", "slurm.conf:1: NodeName=n[1-: bad host list"),
    ("NodeName=GPU01\n", "slurm.conf:1: node name 'GPU01' cannot be used here: simcluster node names are lowercase"),
    ("NodeName=n_[1-3]\n", "node name 'n_1' (and 2 more) cannot be used here"),
    ("NodeName=n1\nPartitionName=gpu.big Nodes=n1\n", "slurm.conf:2: partition name 'gpu.big' cannot be used"),
    ("NodeName=n[1-2]\nNodeName=n2\n", "slurm.conf:2: node 'n2' is defined again (first at "),
    ("NodeName=n1\nPartitionName=p Nodes=n[1-3]\n", "slurm.conf:2: partition 'p' names node 'n2', which no NodeName"),
    ("NodeName=n1\nPartitionName=p Nodes=n1\nPartitionName=p Nodes=n1\n", "slurm.conf:3: partition 'p' is defined again"),
    ("NodeName=n1 CPUs=many\n", "slurm.conf:1: CPUs=many is not a whole number"),
    ("NodeName=n1 Gres=gpu:a:b:c\n", "slurm.conf:1: Gres=gpu:a:b:c: 'gpu:a:b:c' is not gpu[:type][:count]"),
    ("NodeName=n1 Port=high\n", "slurm.conf:1: Port=high is not a port number"),
    ("NodeName=n1\nPartitionName=p Nodes=n1 Default=maybe\n", "slurm.conf:2: Default=maybe: expected YES or NO"),
    ("ClusterName=x\n", "no NodeName line"),
])
def test_bad_confs_are_one_line_with_file_and_line(mirror_of, text, says):
    with pytest.raises(LikeError) as err:
        mirror_of(text)
    assert says in err.value.message
    assert "\n" not in err.value.one_line()


def test_gres_conf_errors_name_their_line(mirror_of):
    with pytest.raises(LikeError, match=r"gres.conf:2: File=/dev/gpu: '/dev/gpu' is not a numbered device"):
        mirror_of("NodeName=n1 Gres=gpu:1\n", gres="AutoDetect=off\nName=gpu File=/dev/gpu\n")
    with pytest.raises(LikeError, match=r"gres.conf:1: a gres.conf line without Name="):
        mirror_of("NodeName=n1 Gres=gpu:1\n", gres="Type=h100 File=/dev/nvidia0\n")


# ------------------------------------------------------------------------ limits

def test_too_many_nodes_suggests_max_nodes(mirror_of):
    with pytest.raises(LikeError, match="2000 nodes, more than simcluster's limit of 1024") as err:
        mirror_of("NodeName=n[1-2000]\n")
    assert "--max-nodes 8" in err.value.hint


def test_too_many_fake_gpus_suggests_max_nodes(mirror_of):
    with pytest.raises(LikeError, match="128 nodes with 1024 GPUs, more than the 256 fake GPUs") as err:
        mirror_of("NodeName=gpu[001-128] Gres=gpu:h100:8\n")
    assert "--max-nodes" in err.value.hint


def test_a_spec_of_the_mirror_is_a_spec_like_any_other(spec_of):
    spec = spec_of("NodeName=gpu[001-128] Gres=gpu:h100:8 Features=ib\nPartitionName=gpu Nodes=ALL\n", max_nodes=3)
    assert [n.name for n in spec.nodes] == ["gpu001", "gpu002", "gpu003"]
    assert dataclasses.replace(spec.nodes[0], gpus=()).features == ("ib",)
