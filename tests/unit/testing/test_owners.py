"""Which pytest process owns which cluster (provisioner/testing/owners.py): records, the
liveness of their owners (pid and start time), and the sweep of orphans. ``down`` is
replaced: no cluster is made or taken down."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from provisioner.errors import ClusterNotFound, SimclusterError
from provisioner.testing import owners


def test_record_names_this_process_and_its_start_time(home):
    path = owners.record("pyt-a-1")
    entry = json.loads(path.read_text())
    assert path == home / ".pytest-owners" / "pyt-a-1.json"
    assert entry["name"] == "pyt-a-1" and entry["pid"] == os.getpid()
    assert entry["start"] == owners.process_start(os.getpid()) is not None
    assert owners.owner_alive(entry)
    assert (path.parent.stat().st_mode & 0o777) == 0o700


def test_forget_removes_the_record_and_a_missing_one_is_fine(home):
    owners.record("pyt-a-2")
    owners.forget("pyt-a-2")
    owners.forget("pyt-a-2")
    assert not (owners.registry_dir() / "pyt-a-2.json").exists()


def test_process_start_of_a_pid_that_does_not_exist():
    assert owners.process_start(2 ** 31 - 1) is None  # above any pid_max


def test_process_start_of_a_zombie_is_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
        assert owners.process_start(child.pid) is None
    finally:
        child.wait()


@pytest.mark.parametrize("entry", [
    {},
    {"pid": "123", "start": "1"},
    {"pid": os.getpid(), "start": "0"},  # a reused pid: same number, another start time
    {"pid": 2 ** 31 - 1, "start": None},
])
def test_owner_is_gone(entry):
    assert not owners.owner_alive(entry)


def test_orphaned_lists_records_of_dead_owners_and_unreadable_ones(home):
    owners.record("pyt-live-1")
    d = owners.registry_dir()
    (d / "pyt-dead-1.json").write_text(json.dumps({"name": "pyt-dead-1", "pid": os.getpid(), "start": "0"}))
    (d / "pyt-bad-1.json").write_text("{not json")
    (d / "other.json").write_text(json.dumps({"pid": 2 ** 31 - 1}))  # not a pytest cluster: never touched
    assert owners.orphaned() == ["pyt-bad-1", "pyt-dead-1"]


def test_orphaned_without_a_registry(home):
    assert owners.orphaned() == []


def test_sweep_takes_down_orphans_and_keeps_the_record_of_one_that_would_not_go(home, monkeypatch):
    from provisioner import named_clusters
    d = owners.registry_dir()
    d.mkdir(parents=True)
    for name in ("pyt-o-1", "pyt-o-2", "pyt-o-3"):
        (d / f"{name}.json").write_text(json.dumps({"name": name, "pid": 2 ** 31 - 1, "start": None}))
    owners.record("pyt-live-2")

    def down(name):
        if name == "pyt-o-2":
            raise ClusterNotFound(name)
        if name == "pyt-o-3":
            raise SimclusterError("slurmctld would not stop")
        return f"cluster '{name}' removed"

    monkeypatch.setattr(named_clusters, "down", down)
    lines = []
    assert owners.sweep(lines.append) == ["pyt-o-1"]
    assert lines[0] == "cluster 'pyt-o-1' removed (its pytest session had ended without taking it down)"
    assert "could not take down leftover cluster 'pyt-o-3': slurmctld would not stop" in lines[1]
    assert sorted(p.stem for p in d.iterdir()) == ["pyt-live-2", "pyt-o-3"]
