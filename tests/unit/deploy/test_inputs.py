"""Deploy inputs without any host: inventory checks, spec -> extra vars, SSH targets, event
handling, status parsing. Bad input is one clear line and exit 2."""

from __future__ import annotations

import pytest

from provisioner.deploy.extravars import build_extravars
from provisioner.deploy.inventory import load_inventory
from provisioner.deploy.playbook import EventPrinter, _error_text
from provisioner.errors import ConfigError, UsageError
from provisioner.providers.ssh.cluster import parse_gres_conf
from provisioner.providers.ssh.session import parse_target
from tests.conftest import run_cli

GOOD = """[controller]
head ansible_host=10.0.0.10

[compute]
gpu1 ansible_host=10.0.0.11 slurm_gpus=0-1
gpu2 ansible_host=10.0.0.12 slurm_cpus=8

[all:vars]
slurm_cluster_name=lab
"""


def write(tmp_path, text, name="inventory.ini"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_inventory_is_read_with_ansibles_own_parser(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.controller.name == "head" and inv.controller.address == "10.0.0.10"
    assert [h.name for h in inv.compute] == ["gpu1", "gpu2"]
    assert inv.compute[1].vars["slurm_cpus"] == 8
    assert [h.name for h in inv.hosts] == ["head", "gpu1", "gpu2"]


@pytest.mark.parametrize("text, message", [
    ("[controller]\nhead foo\n[compute]\nn1\n", "invalid inventory: "),
    ("[compute]\nn1\n", "[controller] must list exactly one host, it lists 0"),
    ("[controller]\na\nb\n[compute]\nn1\n", "it lists 2 (a, b)"),
    ("[controller]\nhead\n", "[compute] must list at least one host"),
    ("[controller]\nhead\n[compute]\n10.0.0.5\n", "'10.0.0.5' cannot be a Slurm node name"),
    ("[controller]\nhead\n[compute]\nn1 slurm_gpus=0-x\n", "n1: slurm_gpus: bad GPU id"),
    ("[controller]\nhead\n[compute]\nn1 slurm_memory=lots\n", "n1: slurm_memory: bad memory size"),
])
def test_bad_inventories_are_usage_errors(tmp_path, text, message):
    with pytest.raises(UsageError) as exc:
        load_inventory(write(tmp_path, text))
    assert exc.value.exit_code == 2
    assert message in exc.value.one_line() + exc.value.details


def test_missing_inventory_is_exit_2_in_one_line(tmp_path):
    proc = run_cli(["deploy", "-i", str(tmp_path / "nope.ini")], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "inventory" in proc.stderr and "does not exist" in proc.stderr


def test_bad_inventory_line_is_exit_2_naming_the_line(tmp_path):
    path = write(tmp_path, "[controller]\nhead\n[compute]\nn1 oops\n")
    proc = run_cli(["deploy", "-i", path], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:4" in proc.stderr and "Traceback" not in proc.stderr


def test_without_spec_only_name_and_key_are_passed(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path / "home"))
    extra = build_extravars(None, load_inventory(write(tmp_path, GOOD)))
    assert extra == {"slurm_cluster_name": "lab",
                     "munge_key_file": str(tmp_path / "home" / ".deploy" / "lab" / "munge.key")}


def test_spec_values_become_overrides_and_only_what_it_says(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path / "home"))
    spec = write(tmp_path, "apiVersion: simcluster/v1\nkind: Cluster\nname: prod\nfakeGpus: true\n"
                           "nodes:\n  - {name: gpu2, gpus: [3], memory: 16G}\n"
                           "partitions:\n  - {name: gpu, nodes: [gpu2]}\n  - {name: all, nodes: ALL}\n"
                           "slurmConf: ['MaxJobCount=5000']\nbackend: docker\n", "c.yaml")
    extra = build_extravars(spec, load_inventory(write(tmp_path, GOOD)))
    assert extra["slurm_cluster_name"] == "prod"
    assert extra["slurm_node_overrides"] == {"gpu2": {"gpus": [3], "memory": 16384}}
    assert extra["slurm_partitions"] == [
        {"name": "gpu", "nodes": ["gpu2"], "default": True, "max_time": "INFINITE", "options": []},
        {"name": "all", "nodes": ["gpu1", "gpu2"], "default": False, "max_time": "INFINITE", "options": []}]
    assert extra["slurm_extra_lines"] == ["MaxJobCount=5000"] and extra["slurm_fake_gpus"] is True
    assert "slurm_controller_port" not in extra and "slurm_wait_timeout" not in extra


def test_accounting_passes_the_specs_sacctmgr_commands_and_no_password(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path / "home"))
    path = write(tmp_path, "apiVersion: simcluster/v1\nkind: Cluster\naccounting: true\n"
                 "qos:\n  - {name: high, priority: 100, limits: {MaxTRESPerUser: gres/gpu=2}}\n"
                 "accounts:\n  - {name: ml, users: [alice], qos: [high]}\n", "c.yaml")
    extra = build_extravars(path, load_inventory(write(tmp_path, GOOD)))
    assert extra["slurm_accounting"] is True and extra["slurm_accounting_users"] == ["alice"]
    assert extra["slurm_db_password_file"] == str(tmp_path / "home" / ".deploy" / "lab" / "db.password")
    cmds = extra["slurm_accounting_commands"].splitlines()
    assert cmds[0] == "add qos high Priority=100"
    assert "add user root Account=ml Cluster=lab" in cmds and "add user alice Account=ml Cluster=lab" in cmds
    assert extra["slurm_accounting_tres_commands"] == "modify qos where name=high set MaxTRESPerUser=gres/gpu=2\n"
    assert not [k for k in extra if "pass" in k.lower() and k != "slurm_db_password_file"]
    assert "slurm_rest" not in extra


def test_rest_deploys_slurmrestd_with_a_key_made_on_the_first_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path / "home"))
    path = write(tmp_path, "apiVersion: simcluster/v1\nkind: Cluster\nrest: true\n", "c.yaml")
    extra = build_extravars(path, load_inventory(write(tmp_path, GOOD)))
    assert extra["slurm_rest"] is True and "slurm_accounting" not in extra
    assert extra["slurm_jwt_key_file"] == str(tmp_path / "home" / ".deploy" / "lab" / "jwt_hs256.key")


@pytest.mark.parametrize("spec, message", [
    ("nodes:\n  - {name: gpu9}\n", "'gpu9' is not a host in the inventory's [compute] group"),
    ("nodes: 3\n", "the spec asks for 3 nodes but the inventory has 2"),
    ("nodes:\n  - {name: gpu2, cpus: 16}\n", "gpu2: cpus is 16 in"),
    ("gpus: 2-5\n", "gpu1: gpus is [2, 3] in"),
    ("partitions:\n  - {name: p, nodes: [nope]}\n", "unknown node 'nope'"),
])
def test_spec_problems_are_reported_together(tmp_path, spec, message):
    path = write(tmp_path, "apiVersion: simcluster/v1\nkind: Cluster\n" + spec, "c.yaml")
    with pytest.raises(ConfigError) as exc:
        build_extravars(path, load_inventory(write(tmp_path, GOOD)))
    assert message in exc.value.one_line() + exc.value.details


def test_ssh_targets():
    assert (lambda t: (t.user, t.host, t.port))(parse_target("root@head")) == ("root", "head", 22)
    assert (lambda t: (t.user, t.host, t.port))(parse_target("me@127.0.0.1:2222")) == ("me", "127.0.0.1", 2222)
    assert parse_target("me@[::1]:2222").host == "::1"
    assert str(parse_target("me@h:2222")) == "me@h:2222"
    for bad in ("root@@x", "a@b:c", "", "a@b:99999"):
        with pytest.raises(UsageError):
            parse_target(bad)


def test_event_printer_groups_hosts_per_task_and_names_failures():
    lines = []
    p = EventPrinter(lines.append)
    ev = lambda kind, **data: p({"event": kind, "event_data": data})
    ev("playbook_on_task_start", role="munge", task="Install munge")
    ev("runner_on_ok", host="n1", res={"changed": True})
    ev("runner_on_ok", host="n2", res={"changed": False})
    ev("playbook_on_task_start", role="slurm_common", task="Skipped everywhere")
    ev("runner_on_skipped", host="n1")
    ev("playbook_on_task_start", role="slurm_common", task="Start slurmd")
    ev("runner_on_failed", host="n2", res={"msg": "non-zero return code", "stderr": "slurmd did not start\nlog line"})
    ev("runner_on_unreachable", host="n3", res={"msg": "Failed to connect to the host via ssh: Connection refused"})
    ev("playbook_on_stats", changed={"n1": 1}, ok={"n1": 2, "n2": 1}, failures={"n2": 1}, dark={"n3": 1}, skipped={})
    assert lines[0].startswith(" - munge : Install munge  changed: n1  ok: n2")
    assert not any("Skipped everywhere" in line for line in lines)
    assert "FAILED: n2" in lines[1] and "UNREACHABLE: n3" in lines[1]
    assert [f.line() for f in p.failures] == [
        "failed on n2 at task 'slurm_common : Start slurmd': slurmd did not start ... log line",
        "cannot reach n3 at task 'slurm_common : Start slurmd': Failed to connect to the host via ssh: Connection refused"]
    assert p.stats["changed"] == {"n1": 1}


def test_check_mode_diffs_are_kept_per_file_with_the_hosts_they_apply_to():
    p = EventPrinter(lambda line: None)
    ev = lambda kind, **data: p({"event": kind, "event_data": data})
    before, after = "ClusterName=c\nPartitionName=main Nodes=ALL\n", "ClusterName=c\nPartitionName=main Nodes=ALL\n" \
        "PartitionName=debug Nodes=n2\n"
    conf = {"before": before, "after": after, "before_header": "/etc/slurm/slurm.conf",
            "after_header": "/root/.ansible/tmp/ansible-local-1/tmpab/slurm.conf.j2"}  # as template says it
    ev("playbook_on_task_start", role="slurm_common", task="Render slurm.conf, gres.conf and cgroup.conf")
    for host in ("n1", "n2"):  # a loop: the items' diffs, only where an item changed
        conf = dict(conf, after_header=conf["after_header"].replace("tmpab", "tmp" + host))  # one per host
        ev("runner_on_ok", host=host, res={"changed": True, "results": [
            {"changed": True, "diff": [conf]},
            {"changed": False, "diff": [{"before": "x", "after": "y", "after_header": "/etc/slurm/gres.conf"}]}]})
    ev("playbook_on_task_start", role="slurm_compute", task="slurmd options")
    ev("runner_on_ok", host="n2", res={"changed": True, "diff": {"before": "A=1\n", "after": "A=2\n",
                                                                    "after_header": "/etc/default/slurmd"}})
    ev("runner_on_ok", host="n1", res={"changed": True, "diff": {"before": {"state": "absent"}, "after": {}}})
    ev("runner_on_ok", host="n1", res={"changed": False, "diff": {"before": "q", "after": "r", "after_header": "/x"}})
    assert [(d.path, d.hosts) for d in p.diffs] == [("/etc/slurm/slurm.conf", ["n1", "n2"]),
                                                    ("/etc/default/slurmd", ["n2"])]
    text = p.diffs[0].render()
    assert text.startswith("--- /etc/slurm/slurm.conf on n1, n2\n@@ ") and "+PartitionName=debug Nodes=n2\n" in text
    assert "-A=1\n+A=2\n" in p.diffs[1].render()


def test_error_text_of_a_loop_names_the_item():
    res = {"msg": "One or more items failed", "results": [
        {"item": "gres.conf", "failed": False}, {"item": "slurm.conf", "failed": True, "msg": "'x' is undefined"}]}
    assert _error_text(res) == "slurm.conf: 'x' is undefined"


def test_gres_conf_gives_gpu_ids_and_device_files():
    gres = parse_gres_conf("# c\nNodeName=node1 Name=gpu File=/dev/nvidia6\nNodeName=node1 Name=gpu File=/dev/nvidia7\n"
                           "NodeName=node2 Name=gpu File=/var/lib/x/gpus/nvidia0\n")
    assert gres.ids == {"node1": [6, 7], "node2": [0]}
    assert gres.files["node2"] == ["/var/lib/x/gpus/nvidia0"]


def test_gres_conf_lines_for_several_nodes_give_each_node_its_gpus():
    # As the templates group alike nodes (config/nodelines.py), typed or not.
    gres = parse_gres_conf("NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia0\n"
                           "NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia1\nNodeName=cpu1 Name=gpu File=/dev/nvidia3\n")
    assert gres.ids == {"gpu01": [0, 1], "gpu02": [0, 1], "cpu1": [3]}
