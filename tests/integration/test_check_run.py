"""`simcluster check --run` on real daemons: a throwaway chk- cluster shaped by the script's
header runs it with the recorder, and is gone afterwards."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, daemons_under, run_cli

pytestmark = pytest.mark.integration
SEEDS = REPO / "tests" / "data" / "check" / "seeds"


def _cgroups() -> bool:
    """Do local clusters here get device cgroups (root on a cgroup v1 host)?"""
    from provisioner.providers.local import cgroups
    return not cgroups.unavailable_reason()


def _run(script, home):
    proc = run_cli(["check", "--run", "--json", "--no-shellcheck", str(script)], home, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_run_shows_duplicate_ranks_of_rank_exported_in_batch_shell(sim_home):
    rc, data = _run(SEEDS / "ch8a-3.2-train_ddp.sh", sim_home)
    run = data["run"]
    assert rc == 1 and run["state"] == "COMPLETED" and run["cluster"].startswith("chk-")
    assert sorted(p["node"] for p in run["processes"]) == ["node1", "node2"]
    assert [p["env"]["RANK"] for p in run["processes"]] == ["0", "0"]
    dup = [c for c in run["collisions"] if c["rule"] == "run.duplicate-rank"]
    assert dup and "duplicate rank 0" in dup[0]["message"] and dup[0]["line"] == 23
    assert "node1 task 0" in dup[0]["message"] and "node2 task 1" in dup[0]["message"]
    assert any(c["rule"] == "run.missing-rank" for c in run["collisions"])
    # the throwaway cluster is gone: no state, no daemon
    assert not [p for p in sim_home.iterdir() if "chk-" in p.name]  # state and lock file
    assert daemons_under(sim_home) == []


def test_run_of_corrected_script_has_no_collision(sim_home):
    rc, data = _run(SEEDS / "fixed" / "ch8a-9.2-train_distributed.sh", sim_home)
    run = data["run"]
    assert rc == 0 and run["state"] == "COMPLETED", run
    ranks = sorted(p["env"]["RANK"] for p in run["processes"])
    assert ranks == ["0", "1"] and run["collisions"] == []
    # one fake GPU each, not shared (with device cgroups each node numbers its own from 0)
    assert len({(p["node"], p["gpu"]) for p in run["processes"]}) == 2
    assert {p["gpu"] for p in run["processes"]} == ({"0"} if _cgroups() else {"0", "1"})
