"""The pytest plugin's job faults, as a client project meets them: `slurm_faults.time_limit`
and `slurm_faults.preempt` in an inner pytest session against a real cluster made from a spec
file with preemption (tests/data/signals/preempt.yaml)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.plugin.test_pytest_plugin import inner_pytest, leftovers, outcomes

pytestmark = pytest.mark.integration
SPEC = REPO / "tests" / "data" / "signals" / "preempt.yaml"

INNER = f'''
    import pytest
    from provisioner.errors import UsageError

    @pytest.mark.slurm(config="{SPEC}")
    def test_time_limit_and_preempt(slurm_cluster, slurm_faults):
        job = slurm_cluster.sbatch("#SBATCH --time=24:00:00 --signal=B:USR1@90 --requeue --mem=32M -p low\\n"
                                   "while true; do sleep 1 & wait $!; done", wait=False)
        job.wait(until=["RUNNING"], timeout=60)
        said = slurm_faults.time_limit(job, 90)
        assert "--signal=B:USR1@90: SIGUSR1 to the batch shell" in said, said
        assert job.refresh().info["TimeLimit"] in ("00:02:00", "00:03:00")
        said = slurm_faults.preempt(job.id)  # a plain id: the test's cluster
        assert "PreemptMode=REQUEUE (from partition 'low')" in said, said
        job.wait(until=["PENDING"], timeout=30)
        assert job.restarts == 1
        with pytest.raises(UsageError, match="is PENDING, not running"):
            slurm_faults.preempt(job, mode="cancel")
        slurm_cluster.run(["scancel", str(job.id)])
'''


def test_slurm_faults_time_limit_and_preempt(sim_home, tmp_path):
    proc = inner_pytest(tmp_path / "proj", sim_home, {"test_inner.py": INNER})
    assert outcomes(proc.stdout) == {"passed": 1}, proc.stdout
    assert not leftovers(sim_home)
