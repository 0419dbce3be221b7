"""Small jobs on the tuned scheduler (slurm.conf's no-op Epilog, docs/benchmarks-throughput.md).

The Epilog only changes *when* slurmctld schedules (at each job's end instead of on its
once-a-second pass). These tests prove what users rely on still holds: single-CPU jobs
share a node side by side, and a stream of short jobs on a full node all run, each to
COMPLETED. No timing is asserted (the benchmark measures speed).
"""

from __future__ import annotations

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.integration

# Each job announces itself, then waits for its partner's announcement: both can end
# COMPLETED only if they ran at the same time on the node.
RENDEZVOUS = """#!/bin/bash
#SBATCH --nodes=1 --ntasks=1 --cpus-per-task=1 --mem=32M --time=1 --nodelist=node1
touch "here-$ME"
for _ in $(seq 300); do
  [ -e "here-$OTHER" ] && { echo "MET $OTHER on $SLURMD_NODENAME"; exit 0; }
  sleep 0.1
done
echo "never met $OTHER"; exit 1
"""


def _states(c, ids):
    out = c.run(["squeue", "--noheader", "--states=all", "--format=%i %T", f"--jobs={','.join(ids)}"]).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_single_cpu_jobs_share_a_node_and_a_stream_of_short_jobs_all_complete(make_cluster, tmp_path):
    c = make_cluster("--nodes", "1", "--cpus", "2", "--memory", "1000")
    config = c.run(["scontrol", "show", "config"]).stdout.splitlines()
    # /bin/true, or with the container plugin the script that also removes named containers.
    epilog = "/bin/true" if "PlugStackConfig=" not in c.slurm_conf.read_text() else str(c.root / "etc" / "epilog.sh")
    assert [x.split("=", 1)[1].strip() for x in config if x.split("=")[0].strip() == "Epilog"] == [epilog]
    script = tmp_path / "rendezvous.sh"
    script.write_text(RENDEZVOUS)
    ids = [c.run(["sbatch", "--parsable", f"--export=ALL,ME={me},OTHER={other}", str(script)],
                 cwd=tmp_path).stdout.strip() for me, other in (("a", "b"), ("b", "a"))]
    wait_for("both rendezvous jobs to end",
             lambda: set(_states(c, ids).values()) <= {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"}, timeout=60)
    assert _states(c, ids) == {ids[0]: "COMPLETED", ids[1]: "COMPLETED"}, (tmp_path / f"slurm-{ids[0]}.out")
    assert "MET b on node1" in (tmp_path / f"slurm-{ids[0]}.out").read_text()

    # 24 one-CPU jobs on a 2-CPU node: 22 wait; each job's end must start the next ones.
    stream = [c.run(["sbatch", "--parsable", "--mem=32M", "--time=1", "--output=s-%j.out",
                     "--wrap", "echo ran $SLURM_JOB_ID"], cwd=tmp_path).stdout.strip() for _ in range(24)]
    wait_for("the 24 short jobs to leave the queue",
             lambda: not c.run(["squeue", "--noheader", "--format=%i"]).stdout.strip(), timeout=90)
    assert set(_states(c, stream).values()) == {"COMPLETED"}
    assert all((tmp_path / f"s-{j}.out").read_text().strip() == f"ran {j}" for j in stream)
