"""The contract suite's read-only part on a deployed cluster, over SSH (the rig of conftest.py).

`status --ssh`, `export-logs --ssh` and `verify --ssh` run the same code as on local and
docker clusters; these are tests/contract/test_cluster.py's assertions where a deployed
cluster can meet them: the status model's keys, the common bundle, local verify's check
names.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET

import pytest

from tests.ansible.rig import docker
from tests.conftest import not_passed, run_cli
from tests.contract.keys import key_paths, reference_status_keys
from tests.contract.test_cluster import BUNDLE

pytestmark = pytest.mark.integration
# What a deployed cluster's bundle may add to the common one: the TaskProlog the roles
# install where there are no device cgroups; the daemons' .out files do not exist there.
SSH_EXTRAS = [r"config/task_prolog\.sh", r"config/[\w.-]+\.conf"]


def ssh(setup, *args, timeout=300):
    return run_cli([*args, "--ssh", setup["target"], *setup["ssh"]], setup["home"], timeout=timeout)


def local_check_names(suites):
    """The checks local `verify --suite ...` runs on a cluster without accounting."""
    from provisioner.config.types import ClusterSpec
    from provisioner.verify.suites import checks_for
    spec = ClusterSpec(name="x", backend="local", nodes=(), partitions=(), accounting=False)
    return [c.name for c in checks_for(suites, spec)]


def test_status_json_has_the_models_keys_and_a_healthy_cluster(deployed, setup):
    proc = ssh(setup, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)
    assert key_paths(st) == reference_status_keys()
    assert st["name"] == setup["name"] and st["backend"] == "ssh" and st["phase"] == "running"
    assert st["healthy"] is True and st["controller"]["responding"] and st["munged"]["alive"], st
    assert [n["name"] for n in st["nodes"]] == ["node1", "node2"]
    assert all(n["ready"] and n["slurmd_alive"] for n in st["nodes"]), st["nodes"]
    assert st["fake_gpus"] is True and st["accounting"]["enabled"] is False and st["hints"] == []


def test_export_logs_bundle_is_the_common_one(deployed, rig, setup, tmp_path):
    out = tmp_path / "bundle"
    proc = ssh(setup, "export-logs", str(out))
    assert proc.returncode == 0, proc.stderr
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert proc.stdout.strip() == f"wrote {len(names)} files to {out}"
    assert BUNDLE <= names, f"missing: {sorted(BUNDLE - names)}"
    unexpected = sorted(n for n in names - BUNDLE if not any(re.fullmatch(x, n) for x in SSH_EXTRAS))
    assert not unexpected, f"not in the common bundle nor an ssh extra: {unexpected}"
    assert not [n for n in names if "munge.key" in n]
    assert "NodeName=node2" in (out / "scontrol-show-node.txt").read_text()
    assert "slurmctld: slurm" in (out / "versions.txt").read_text()
    assert f"ClusterName={setup['name']}" in (out / "config" / "slurm.conf").read_text()
    # Read on node2 itself (through srun): the host's own file, as far as it was written then.
    on_node2 = docker("exec", rig.container("node2"), "cat", "/var/log/slurm/slurmd-node2.log").stdout
    bundled = (out / "logs" / "slurmd-node2.log").read_text()
    assert bundled and on_node2.startswith(bundled), bundled[:200]
    state = json.loads((out / "state.json").read_text())
    assert state["name"] == setup["name"] and state["backend"] == "ssh" and all(state["alive"].values()), state


def test_verify_over_ssh_runs_the_same_checks_as_local_verify(deployed, setup):
    junit = setup["home"] / "verify-ssh.xml"
    t0 = time.monotonic()
    proc = ssh(setup, "verify", "--suite", "basic,ddp", "--junit", str(junit), "--json", "--timeout", "240",
               timeout=900)
    print(f"\nverify --ssh basic,ddp: {time.monotonic() - t0:.1f}s\n{proc.stderr}")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    reported = [tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase")]
    assert reported == local_check_names(["basic", "ddp"])
    result = json.loads(proc.stdout)
    assert [c["name"] for c in result["checks"]] == reported
    by_name = {c["name"]: c for c in result["checks"]}
    # The roles deploy without cgroups by default: what that leaves out is a SKIP naming the
    # reason status gives (basic.limits, the GPU-device part of basic.isolation), never a FAIL.
    st = json.loads(ssh(setup, "status", "--json").stdout)
    # The roles do not install the container plugin (docker node images have it): basic.container
    # SKIPs saying so.
    assert not not_passed(result["checks"], st["node_cgroups"], may_skip=("basic.container",)), \
        {n: c["message"] for n, c in by_name.items()}
    assert "no --container-image" in by_name["basic.container"]["message"]
    # TaskProlog: each node's own (fake) GPU id, as gres.conf gives it (node2 owns GPU 1).
    assert "physical GPU ids (fake) in batch and srun steps: node1=0 node2=1" in by_name["basic.gpus"]["message"]
    assert "2 ranks on node1+node2, cpu/gloo" in by_name["ddp.train"]["message"]
