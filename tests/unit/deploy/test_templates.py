"""One source of Slurm config text: the roles render configs/templates exactly as Python does.

Runs the roles' context and render tasks on this machine (ansible-playbook, local
connection, no SSH, no docker) and compares with provisioner/render.py.
"""

from __future__ import annotations

import getpass
from dataclasses import asdict
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.config.validate import validate
from provisioner.nodepaths import NodePaths
from provisioner.paths import PLAYBOOK_DIR, ClusterLayout, templates_dir
from provisioner.render import AccountingInputs, RenderInputs, build_context, render_all

BIN = Path(sys.executable).parent


def run_render_check(tmp_path: Path, inventory: str, extra: dict) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    inv = tmp_path / "inventory.ini"
    inv.write_text(inventory)
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps({"slurm_conf_dir": str(out),
                                      "slurm_templates_dir": str(templates_dir()), **extra}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(PLAYBOOK_DIR / "ansible.cfg"),
               ANSIBLE_ROLES_PATH=str(PLAYBOOK_DIR / "roles"),
               ANSIBLE_FILTER_PLUGINS=str(PLAYBOOK_DIR / "filter_plugins"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(Path(__file__).with_name("render_check.yml")),
                           "-e", f"@{extra_file}", "-v"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    (tmp_path / "ansible.log").write_text(proc.stdout)
    return out


LOCAL = 'ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"'
INVENTORY = f"""[controller]
head {LOCAL}

[compute]
gpu1 {LOCAL} slurm_gpus=6 slurm_cpus=112 slurm_memory=240000 slurm_node_addr=10.0.0.11
gpu2 {LOCAL} slurm_gpus=7 slurm_cpus=112 slurm_memory=240000 slurm_node_addr=10.0.0.12
"""


def seed_like_spec():
    return validate({"name": "prod", "nodes": [{"name": "gpu1", "gpus": [6], "cpus": 112, "memory": 240000},
                                               {"name": "gpu2", "gpus": [7], "cpus": 112, "memory": 240000}],
                     "partitions": [{"name": "gpu", "nodes": "ALL", "default": True}],
                     "slurmConf": ["MaxJobCount=20000"]}, host_cpus=2, host_memory_mb=4096)


def test_role_context_has_exactly_the_python_context_keys(tmp_path):
    out = run_render_check(tmp_path, INVENTORY, {})
    role_ctx = json.loads((out / "context.json").read_text())
    spec = seed_like_spec()
    py_ctx = build_context(spec, RenderInputs(paths=NodePaths.of_layout(ClusterLayout(tmp_path)), hostname="head",
                                              slurm_user="slurm", controller_port=6817,
                                              node_ports={"gpu1": 6818, "gpu2": 6818}))
    assert sorted(role_ctx) == sorted(py_ctx), "the role's context.json.j2 and render.yml must pass every key"
    assert sorted(role_ctx["nodes"][0]) == sorted(py_ctx["nodes"][0])
    assert role_ctx["nodes"] == [
        {"name": "gpu1", "hostname": "gpu1", "addr": "10.0.0.11", "port": 6818, "cpus": 112, "memory": 240000, "gpus": [6], "gpu_type": None, "features": [], "options": [], "mig": [], "shards": 0, "mps": 0},
        {"name": "gpu2", "hostname": "gpu2", "addr": "10.0.0.12", "port": 6818, "cpus": 112, "memory": 240000, "gpus": [7], "gpu_type": None, "features": [], "options": [], "mig": [], "shards": 0, "mps": 0},
    ]
    assert role_ctx["partitions"] == [{"name": "main", "nodes": ["gpu1", "gpu2"], "default": True,
                                       "max_time": "INFINITE", "options": []}]
    assert role_ctx["def_mem_per_cpu"] == py_ctx["def_mem_per_cpu"] == 240000 // 112
    text = (out / "slurm.conf").read_text()
    # Hosts of one shape share a line, as `up` writes them (the same filter: config/nodelines.py).
    assert ("NodeName=gpu[1-2] NodeHostname=gpu[1-2] NodeAddr=10.0.0.[11-12] Port=6818 CPUs=112 RealMemory=240000 "
            "Gres=gpu:1") in text
    assert (out / "gres.conf").read_text().splitlines()[-1] == "NodeName=gpu2 Name=gpu File=/dev/nvidia7"


def test_ansible_renders_the_same_text_as_the_python_renderer(tmp_path):
    spec = seed_like_spec()
    inputs = RenderInputs(paths=NodePaths.of_layout(ClusterLayout(Path("/var/lib/simcluster/prod"))), hostname="head",
                          slurm_user="slurm", controller_port=6817, node_ports={"gpu1": 17016, "gpu2": 17017},
                          nss_wrapper_lib="libnss_wrapper.so")
    ctx = build_context(spec, inputs)
    out = run_render_check(tmp_path, INVENTORY, {"slurm_ctx": ctx})
    for name, text in render_all(spec, inputs).items():
        assert (out / name).read_text() == text, f"{name} differs between Ansible and Python"


def test_role_context_with_accounting_and_rest_names_the_controller_the_key_and_no_password(tmp_path):
    password = tmp_path / "db.password"
    password.write_text("pw")
    out = run_render_check(tmp_path, INVENTORY.replace("head ", "head slurm_node_addr=10.0.0.10 "),
                           {"slurm_accounting": True, "slurm_db_password_file": str(password), "slurm_rest": True})
    ctx = json.loads((out / "context.json").read_text())
    acct = ctx["accounting"]
    assert ctx["rest"] == {"jwt_key": "/var/lib/slurm/jwt_hs256.key"}
    assert sorted(acct) == sorted(asdict(AccountingInputs()))
    assert (acct["dbd_addr"], acct["dbd_port"], acct["storage_host"], acct["storage_port"], acct["storage_pass"]) == (
        "10.0.0.10", 6819, "127.0.0.1", 3306, "")
    text = (out / "slurm.conf").read_text()
    assert "AccountingStorageHost=10.0.0.10\nAccountingStoragePort=6819" in text
    assert "AuthAltParameters=jwt_key=/var/lib/slurm/jwt_hs256.key" in text
    assert "AuthAltParameters=jwt_key=/var/lib/slurm/jwt_hs256.key" in (out / "slurmdbd.conf").read_text()


def test_ansible_renders_slurmdbd_conf_as_python_does_with_the_password_from_its_file(tmp_path):
    # With REST too: the JWT lines of slurm.conf and slurmdbd.conf come from the rest key.
    spec = validate({"name": "prod", "accounting": True, "rest": True, "nodes": [{"name": "gpu1"}, {"name": "gpu2"}]},
                    host_cpus=2, host_memory_mb=4096)
    acct = AccountingInputs(dbd_host="head", dbd_addr="10.0.0.10", storage_pass="s3cret-db-pass")
    inputs = RenderInputs(paths=NodePaths.of_layout(ClusterLayout(Path("/var/lib/simcluster/prod"))), hostname="head",
                          slurm_user=getpass.getuser(), controller_port=6817, node_ports={"gpu1": 6818, "gpu2": 6818},
                          accounting=acct)
    ctx = build_context(spec, inputs)
    password = tmp_path / "db.password"
    password.write_text(acct.storage_pass)
    # The role's context never holds the password: the render task adds it from the file.
    role_ctx = dict(ctx, accounting=dict(ctx["accounting"], storage_pass=""))
    out = run_render_check(tmp_path, INVENTORY, {"slurm_ctx": role_ctx, "slurm_db_password_file": str(password)})
    dbd, python = out / "slurmdbd.conf", render_all(spec, inputs)
    assert dbd.read_text() == python["slurmdbd.conf"] and (out / "slurm.conf").read_text() == python["slurm.conf"]
    assert "AuthAltTypes=auth/jwt" in dbd.read_text() and "AuthAltTypes=auth/jwt" in python["slurm.conf"]
    assert "StoragePass=s3cret-db-pass" in dbd.read_text() and oct(dbd.stat().st_mode & 0o777) == "0o600"
    log = (tmp_path / "ansible.log").read_text()
    assert "Render slurmdbd.conf" in log and "s3cret-db-pass" not in log


def test_inventory_shapes_and_partitions_from_group_vars(tmp_path):
    inventory = INVENTORY.replace("slurm_gpus=6 ", "").replace("slurm_gpus=7 ", "slurm_gpus=0-1 ") + (
        "\n[all:vars]\nslurm_cluster_name=lab\n")
    out = run_render_check(tmp_path, inventory, {
        "slurm_partitions": [{"name": "a", "nodes": ["gpu1"]}, {"name": "b", "nodes": "ALL", "default": True}]})
    text = (out / "slurm.conf").read_text()
    assert "ClusterName=lab" in text
    assert "PartitionName=a Nodes=gpu1 Default=NO" in text
    assert "PartitionName=b Nodes=gpu[1-2] Default=YES" in text
    assert (out / "gres.conf").read_text().count("NodeName=gpu2") == 2


@pytest.mark.parametrize("good, bad, message", [("slurm_gpus=6", "slurm_gpus=0-x", "slurm_gpus"),
                                                ("slurm_memory=240000", "slurm_memory=lots", "slurm_memory")])
def test_bad_host_vars_fail_with_the_variable_named(tmp_path, good, bad, message):
    inventory = INVENTORY.replace(good, bad, 1)
    with pytest.raises(AssertionError) as exc:
        run_render_check(tmp_path, inventory, {})
    assert message in str(exc.value)
