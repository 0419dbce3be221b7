"""A local cluster's processes (providers/local/processes.py), on processes this test starts:
the marked ones and what they started are the cluster's, a process that only names the
cluster's files is not, and terminate ends them (SIGKILL for one that ignores SIGTERM)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from provisioner.cluster.model.handle import MARKER_VAR
from provisioner.providers.local import processes

# A daemon of the cluster that starts a child (a slurmstepd and its job task), then waits.
PARENT = ("import subprocess, sys, time\n"
          "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env={})\n"
          "print(child.pid, flush=True)\n"
          "time.sleep(60)\n")


@pytest.fixture
def started():
    procs = []

    def start(argv, env=None):
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        return p
    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_marked_processes_and_their_children_are_the_clusters_a_reader_of_its_files_is_not(tmp_path, started):
    root = tmp_path / "c1"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "slurm.conf").write_text("x\n")
    daemon = started([sys.executable, "-c", PARENT], env={**os.environ, MARKER_VAR: str(root)})
    child = int(daemon.stdout.readline())
    reader = started(["tail", "-f", str(root / "etc" / "slurm.conf")])
    other = started([sys.executable, "-c", PARENT], env={**os.environ, MARKER_VAR: str(tmp_path / "c2")})
    other_child = int(other.stdout.readline())
    found = processes.cluster_pids(root)
    assert daemon.pid in found and child in found
    assert reader.pid not in found and other.pid not in found and other_child not in found
    try:
        assert processes.terminate(found, grace=2.0) == []
        assert processes.cluster_pids(root) == []
        assert reader.poll() is None and other.poll() is None  # untouched
    finally:
        for pid in (child, other_child):  # grandchildren: the fixture ends only its own children
            if processes.pid_alive(pid):
                os.kill(pid, 9)


def test_terminate_kills_what_ignores_sigterm(started):
    stubborn = started([sys.executable, "-c", "import signal, time\n"
                        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"])
    assert stubborn.stdout.readline().strip() == "ready"
    assert processes.terminate([stubborn.pid], grace=0.3) == []
    assert not processes.pid_alive(stubborn.pid)  # SIGTERM alone would have left it running
