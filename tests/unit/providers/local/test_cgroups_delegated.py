"""cgroup v2 delegated to an ordinary user (providers/local/cgroups_delegated.py): a systemd
user scope per node start, the chain that makes the node's tree in it, what is enforced
and what is not (pure logic, and one real scope where this host has a user manager)."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from provisioner.cluster.model import command_runner as runner
from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.providers.local import cgroups_delegated, names, userns
from provisioner.render import render_all
from tests.unit.conftest import fixed_inputs, spec_from


def test_rootless_delegation_says_why_not_on_v1_and_for_newer_slurm(tmp_path):
    assert cgroups_delegated.delegation("22.05.8", root=tmp_path).reason == cgroups_delegated.ROOTLESS_V1  # no cgroup.controllers: v1
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    why = cgroups_delegated.delegation("24.11.5", root=tmp_path).reason
    assert "24.11.5" in why and "limits are not enforced" in why
    (tmp_path / "cgroup.controllers").write_text("cpu pids\n")
    assert "without the memory controller" in cgroups_delegated.delegation("22.05.8", root=tmp_path).reason


def test_a_node_start_runs_in_a_scope_of_its_own_named_by_cluster_node_and_pid(tmp_path):
    """scope_argv, run with a stand-in for systemd-run that prints what it was given: the
    user's runtime directory, a delegated scope, a unit name per cluster, node and start,
    and the rest of the chain after `--` (systemd-run execs it)."""
    fake = tmp_path / "systemd-run"
    fake.write_text('#!/bin/sh\necho "XDG=$XDG_RUNTIME_DIR"; for a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    argv = [a.replace(NODE_TOKEN, "node1") for a in cgroups_delegated.scope_argv("abc123", "/run/user/1001")]
    argv[-1] = str(fake)
    out = subprocess.run(argv + ["next", "arg"], stdout=subprocess.PIPE, text=True, check=True).stdout.split("\n")
    assert out[0] == "XDG=/run/user/1001"
    assert out[1:5] == ["--user", "--scope", "--quiet", "--collect"] and "Delegate=yes" in out
    unit = next(a for a in out if a.startswith("--unit="))
    assert unit.startswith("--unit=simcluster-abc123-node1-") and unit.rsplit("-", 1)[1].isdigit()
    assert out[out.index("--") + 1:out.index("--") + 3] == ["next", "arg"]


def test_rootless_delegated_chain_makes_the_nodes_tree_in_its_scope_then_goes_on_as_roots():
    """Outside in: the scope (this host's namespaces: systemd must see the user's process),
    the cluster's user namespace, the node's network, the join script that makes the node's
    cgroup namespace while it is the scope's only process, root's v2 namespace script
    (no --cgroup: made already), the user mapped back, slurmd with the chown shim."""
    scope, enter = cgroups_delegated.scope_argv("abc123", "/run/user/1001"), userns.enter_argv("/c/netns")
    argv = names.namespace_prefix("/c/etc/node-mounts.fstab", 1001, 1002, "/usr/bin/tini", "/c/spool",
                                  netns="/c/netns/n", starter="/x/simcluster-node-start", enter=enter,
                                  cgroup_scope=scope)
    assert argv[:len(scope)] == scope and argv[len(scope):len(scope) + len(enter)] == enter
    rest = argv[len(scope) + len(enter):]
    assert "/x/simcluster-node-start" not in rest  # the chain: the starter knows no scope
    join = rest.index(cgroups_delegated.scope_join_script())
    unshare = next(i for i, a in enumerate(rest) if a.endswith("unshare"))
    assert rest[0].endswith("nsenter") and rest[1] == "--net=/c/netns/n" and join < unshare
    assert "--cgroup" not in rest[unshare:]
    script = next(a for a in rest if " -a " in a)
    assert "-l /sys/fs/cgroup" in script and "for p in 1 $$; do echo $p > /sys/fs/cgroup/init/cgroup.procs" in script
    assert rest[-6:] == [runner.find_binary("unshare"), "--user", "--map-user=1001", "--map-group=1002",
                         *cgroups_delegated.preload_argv()]
    assert cgroups_delegated.preload_argv()[1] == f"LD_PRELOAD={cgroups_delegated.CHOWN_SHIM}"


def test_the_join_script_makes_the_namespace_before_it_leaves_the_scope():
    """A cgroup namespace is rooted where its maker is: `unshare --cgroup` runs while the
    process is still in N, and only then does it move into N/starter and give N's children
    their controllers (a cgroup that gives controllers holds no process)."""
    script = cgroups_delegated.scope_join_script()
    assert script.index("--cgroup") < script.index('"$0/starter/cgroup.procs"') < script.index("cgroup.subtree_control")
    assert "unset INVOCATION_ID" in script  # else slurmd stays in /init instead of its slurmstepd scope


def test_cgroup_conf_without_device_or_core_confinement():
    spec = spec_from({"name": "v2", "nodes": 1, "fakeGpus": 1})
    inputs = fixed_inputs(spec)
    text = render_all(spec, replace(inputs, cgroups=True, cgroup_devices=False, cgroup_cores=False))["cgroup.conf"]
    assert "\nConstrainDevices=no\n" in text and "\nConstrainCores=no\n" in text and "cpuset" in text
    assert "\nConstrainRAMSpace=yes\n" in text
    full = render_all(spec, replace(inputs, cgroups=True))["cgroup.conf"]
    assert "\nConstrainDevices=yes\n" in full


def test_without_device_confinement_jobs_get_physical_ids_and_the_device_check_skips():
    """Every node then sees all of the host's GPUs: the TaskProlog maps Slurm's indices to the
    node's own (gpu_map), and basic.isolation's GPU part is a SKIP that says why, while
    basic.limits (--mem) still runs."""
    from provisioner.render import build_context
    from provisioner.verify.targets import NodeFacts, node_facts
    spec = spec_from({"name": "v2", "nodes": 1, "fakeGpus": 1})
    inputs = replace(fixed_inputs(spec), cgroups=True, cgroup_devices=False)
    assert build_context(spec, inputs)["gpu_map"] is True
    assert build_context(spec, replace(inputs, cgroup_devices=True))["gpu_map"] is False

    class Placed:
        render, node_network, node_etc_slurm = inputs, "", ""
        node_cgroups = "enforced: ...; GPU devices not confined rootless"
    facts = node_facts(Placed())
    assert facts.cgroups and not facts.devices and facts.devices_note == "GPU devices not confined rootless"
    assert NodeFacts(False, "", True, "", False, "").devices  # built without the field: as cgroups says


def test_rootless_delegation_wants_a_lingering_manager(tmp_path):
    """Without lingering the user's manager stops at the last logout, and every scope it
    holds (the nodes) with it: limits stay off, and the note says how to linger."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    if not cgroups_delegated.CHOWN_SHIM.exists() or not runner.find_binary("systemd-run"):
        pytest.skip("needs the chown shim built (make setup) and systemd-run")
    why = cgroups_delegated.delegation("22.05.8", root=tmp_path, linger_dir=str(tmp_path / "linger")).reason
    assert "loginctl enable-linger" in why and "not enforced" in why
