"""basic.isolation and basic.limits on a real local cluster: 2 nodes, 2 fake GPUs.

As root on a cgroup v1 host each node has a network namespace and a cgroup tree of its
own, and both checks must PASS with every part checked: two nodes bind one port at once,
a connection comes from its node's address, srun finds /etc/slurm without SLURM_CONF, a
job opens its own fake GPU (ENXIO) and gets EPERM for the other node's, and a job over
its --mem ends OUT_OF_MEMORY. Where the machine cannot give the nodes that (rootless,
cgroup v2), the parts that need it must be SKIP with the reason `status` gives, never PASS.
"""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.integration

CHECKS = ("basic.isolation", "basic.limits")
PARTS = ("same port on 2 nodes", "peer address", "/etc/slurm", "GPU devices")


def test_isolation_and_limits_on_two_nodes_with_fake_gpus(make_cluster):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    st = json.loads(c.cli(["status", "--json"], check=True).stdout)
    t0 = time.monotonic()
    proc = c.cli(["verify", "--suite", "basic", "--json"], timeout=300)
    took = time.monotonic() - t0
    report = json.loads(proc.stdout)  # --json: stdout is JSON only, the live lines go to stderr
    by_name = {ch["name"]: ch for ch in report["checks"]}
    assert set(CHECKS) <= set(by_name), sorted(by_name)
    iso, lim = by_name["basic.isolation"], by_name["basic.limits"]
    shown = f"{json.dumps([iso, lim], indent=1)}\nstderr:\n{proc.stderr}"

    own_network = st["node_network"].startswith("a network namespace each")
    cgroups = st["node_cgroups"].startswith("enforced")
    etc = st["node_etc_slurm"].startswith("the cluster's config")
    if not (own_network and cgroups and etc):
        # This machine cannot give the nodes all of it: never a PASS, and never a FAIL.
        assert iso["status"] == "SKIP", shown
        for missing, reason in ((own_network, st["node_network"]), (etc, st["node_etc_slurm"])):
            if not missing:
                assert reason in iso["message"], shown
        if not cgroups:
            assert lim["status"] == "SKIP" and lim["message"] == st["node_cgroups"], shown
        return

    assert iso["status"] == "PASS" and lim["status"] == "PASS", shown
    parts = iso["data"]["parts"]
    assert set(parts) == set(PARTS) and all(p["status"] == "PASS" for p in parts.values()), shown
    assert "node1 and node2 held 0.0.0.0:" in parts["same port on 2 nodes"]["detail"]
    assert "node2 -> node1 came from 198.1" in parts["peer address"]["detail"]  # the cluster's 198.18.0.0/15
    assert "ran on node1" in parts["/etc/slurm"]["detail"]
    assert f"{c.root}/dev/nvidia0 (ENXIO" in parts["GPU devices"]["detail"]
    assert "1 other GPU device(s): EPERM" in parts["GPU devices"]["detail"]
    assert lim["data"]["state"] == "OUT_OF_MEMORY", shown
    assert "--mem=200M job touching 600 MB" in lim["message"] and "ended OUT_OF_MEMORY" in lim["message"]
    # Both live lines say PASS; the rest of the basic suite is another test's business.
    for name in CHECKS:
        assert any(line.startswith(name) and " PASS " in line for line in proc.stderr.splitlines()), name
    print(f"verify --suite basic: {took:.1f}s; basic.isolation {iso['seconds']}s, basic.limits {lim['seconds']}s")
