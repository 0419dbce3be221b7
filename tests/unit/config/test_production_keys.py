"""The spec keys that describe a production cluster: typed GPUs, features, node and
partition options, accounts and QoS; their validation, rendering and sacctmgr commands."""

from __future__ import annotations

import pytest

from provisioner.cluster.services.accounting import spec_commands, tres_limit_commands, unknown_users, _refused
from provisioner.config.types import ClusterSpec
from provisioner.errors import ConfigError
from provisioner.render import render_all
from tests.conftest import REPO
from tests.unit.conftest import fixed_inputs, spec_from
from provisioner.config import load_spec

BASE = {"name": "prod", "fakeGpus": True, "accounting": True}


def problems(raw) -> list:
    with pytest.raises(ConfigError) as exc:
        spec_from(raw)
    return exc.value.problems


def test_typed_gpus_features_and_options_render_into_node_lines_and_gres_conf():
    spec = spec_from({"name": "p", "fakeGpus": True, "nodes": [
        {"name": "gpu1", "gpus": "0-7", "gpuType": "h100", "features": ["ib", "h100"], "cpus": 112,
         "options": {"sockets": 2, "CoresPerSocket": 56, "ThreadsPerCore": 1}},
        {"name": "cpu1", "cpus": 8, "features": "icelake,avx512"}]})
    files = render_all(spec, fixed_inputs(spec))
    conf = files["slurm.conf"]
    assert ("NodeName=gpu1 NodeHostname=simhost NodeAddr=127.0.0.1 Port=6818 CPUs=112 Sockets=2 CoresPerSocket=56 "
            "ThreadsPerCore=1 RealMemory=") in conf
    assert "Gres=gpu:h100:8 Features=ib,h100 State=UNKNOWN" in conf
    assert "NodeName=cpu1" in conf and "Features=icelake,avx512 State=UNKNOWN" in conf
    gres = [line for line in files["gres.conf"].splitlines() if line.startswith("NodeName")]
    assert gres[0] == "NodeName=gpu1 Name=gpu Type=h100 File=/state/x/dev/nvidia0"
    assert len(gres) == 8


def test_top_level_gpu_type_and_features_apply_to_counted_nodes():
    spec = spec_from({"name": "p", "nodes": 2, "fakeGpus": 4, "gpuType": "a100", "features": ["ib"]})
    assert [(n.gpu_type, n.features) for n in spec.nodes] == [("a100", ("ib",))] * 2
    spec = spec_from({"name": "p", "nodes": [{"name": "a", "gpus": [0]}, {"name": "b"}], "fakeGpus": True,
                      "gpuType": "h100"})
    assert [n.gpu_type for n in spec.nodes] == ["h100", None]  # a node without GPUs has no GPU type


def test_partition_options_render_in_slurm_spelling_and_state_replaces_up():
    spec = spec_from({"name": "p", "nodes": 2, "partitions": [
        {"name": "gpu", "nodes": "ALL", "options": {"prioritytier": 10, "PreemptMode": "requeue",
                                                   "DefaultTime": "1:00:00", "ExclusiveUser": True}},
        {"name": "down", "nodes": ["node1"], "options": {"State": "DOWN"}}]})
    conf = render_all(spec, fixed_inputs(spec))["slurm.conf"]
    assert ("PartitionName=gpu Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP PriorityTier=10 "
            "PreemptMode=requeue DefaultTime=1:00:00 ExclusiveUser=YES\n") in conf
    assert "PartitionName=down Nodes=node1 Default=NO MaxTime=INFINITE State=DOWN\n" in conf


def test_a_slurm_conf_line_replaces_the_built_in_line_of_its_key():
    spec = spec_from({"name": "p", "nodes": 1, "slurmConf": [
        "SelectTypeParameters=CR_Core", "DefMemPerGPU=8000", "KillWait=30", "schedulerparameters=bf_interval=30"]})
    conf = render_all(spec, fixed_inputs(spec))["slurm.conf"]
    lines = conf.splitlines()
    assert "SelectTypeParameters=CR_Core" in lines and "SelectTypeParameters=CR_Core_Memory" not in lines
    assert not any(line.startswith("DefMemPerCPU=") for line in lines)  # exclusive with DefMemPerGPU
    assert [line for line in lines if line.startswith("KillWait")] == ["KillWait=30"]
    assert [line for line in lines if line.lower().startswith("schedulerparameters")] == \
        ["schedulerparameters=bf_interval=30"]
    assert "SelectType=select/cons_tres" in lines  # keys not given stay


def test_bad_production_keys_are_each_reported():
    found = problems({"name": "p", "accounting": True, "fakeGpus": True, "nodes": [
        {"name": "a", "gpus": [0], "gpuType": "h 100", "features": ["ok", "bad feature"],
         "options": {"Port": 1, "Sockets": "two words"}},
        {"name": "b", "gpuType": "h100"}],
        "partitions": [{"name": "p", "options": {"Nodes": "x", "DefaultTime": "soon", "QOS": "gold",
                                                 "PreemptMode": "sometimes", "AllowAccounts": "nobody"}}],
        "qos": [{"name": "low", "preempt": ["ghost"], "preemptMode": "maybe"}, {"name": "LOW"}],
        "accounts": [{"name": "x", "parent": "later", "qos": ["gold"]}, {"name": "later"}]})
    text = "\n".join(found)
    for expect in ("nodes[0].gpuType: 'h 100' is not a GPU type", "nodes[0].features: 'bad feature'",
                   "nodes[0].options: unknown option 'Port'", "nodes[0].options.Sockets: expected one Slurm value",
                   "nodes[1].gpuType: the node has no GPUs", "partitions[0].options: unknown option 'Nodes'",
                   "partitions[0].options.DefaultTime: 'soon' is not a Slurm time",
                   "partitions[0].options.PreemptMode", "qos[0].preempt: unknown QoS 'ghost'",
                   "qos[0].preemptMode", "qos[1].name: QoS 'low' is listed twice",
                   "accounts[0].parent: account 'later' must come before 'x'", "accounts[0].qos: unknown QoS 'gold'",
                   "partitions[0].options.QOS: 'gold' is not in the spec's qos",
                   "partitions[0].options.AllowAccounts: 'nobody' is not in the spec's accounts"):
        assert expect in text, (expect, text)


def test_accounts_and_qos_need_accounting():
    found = problems({"name": "p", "qos": [{"name": "high"}],
                      "partitions": [{"name": "p", "options": {"AllowQos": "high"}}]})
    assert any(p.startswith("accounts") or p.startswith("qos") for p in found)
    assert any("partitions[0].options.AllowQos: QoS live in the accounting database" in p for p in found)


def test_spec_commands_make_qos_before_accounts_and_set_preemption_after_all_exist():
    spec = spec_from({**BASE, "nodes": 1,
                      "qos": [{"name": "high", "priority": 100, "preempt": ["low"],
                               "limits": {"MaxWall": "1-00:00:00", "MaxTRESPerUser": "gres/gpu=16"}},
                              {"name": "low", "preemptMode": "requeue", "graceTime": 30},
                              {"name": "normal", "priority": 10}],
                      "accounts": [{"name": "ML", "fairshare": 5, "users": ["root", "nobody-here"],
                                    "defaultQos": "normal"},
                                   {"name": "ml-sub", "parent": "ml", "qos": ["low"]}]})
    assert [a.name for a in spec.accounts] == ["ml", "ml-sub"]  # Slurm keeps them in lower case
    lines = spec_commands(spec, "root", ["root"]).splitlines()
    assert lines == [
        "add qos high Priority=100 MaxWall=1-00:00:00",
        "add qos low PreemptMode=requeue GraceTime=30",
        "modify qos where name=normal set Priority=10",
        "modify qos where name=high set Preempt=low",  # once every QoS exists
        "modify account where name=simcluster cluster=prod set QOS=normal,high,low",
        "add account ml Cluster=prod Parent=root Description=ml Organization=ml QOS=normal,high,low Fairshare=5 "
        "DefaultQOS=normal",
        "add account ml-sub Cluster=prod Parent=ml Description=ml-sub Organization=ml-sub QOS=low",
        "add user root Account=ml,ml-sub Cluster=prod",
    ]
    # TRES limits wait for slurmctld's registration (gres/gpu is unknown to slurmdbd before).
    assert tres_limit_commands(spec) == "modify qos where name=high set MaxTRESPerUser=gres/gpu=16\n"
    assert unknown_users(spec, ["root"]) == ["nobody-here"]


def test_a_spec_without_accounts_or_qos_needs_no_commands():
    assert spec_commands(spec_from({**BASE, "nodes": 1}), "root", []) == ""


def test_sacctmgr_refusals_are_found_in_its_words():
    assert _refused(" Adding QOS(s)\n  high\n") == ""
    assert _refused("sacctmgr: error: You gave a bad qos 'x'.") == "You gave a bad qos 'x'."
    assert _refused(" This account 'ml' doesn't exist.") == "This account 'ml' doesn't exist."


def test_new_fields_survive_the_state_file():
    spec = load_spec(str(REPO / "configs/examples/gpu-cluster.yaml"), cpus=2, memory_mb=2000)
    assert ClusterSpec.from_dict(spec.to_dict()) == spec
    assert spec.node("gpu001").gpu_type == "h100" and "ib" in spec.node("gpu001").features
    assert spec.partitions[0].option("defaulttime") == "01:00:00"
    assert {q.name for q in spec.qos} == {"low", "high", "normal"}
