"""The examples/ sbatch scripts run unchanged with `sbatch` on a simcluster cluster.

All four are submitted at once (as a user might), from a scratch directory, by their
absolute path: the scripts find their Python files and the repository's .venv themselves.
"""

from __future__ import annotations

import importlib.util
import re
import time

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

EXAMPLES = {  # script -> (module it needs, what its output must show)
    "examples/train_ddp.sh": ("torch", [r"rank 0/2 on node\d", r"rank 1/2 on node\d", r"epoch 4: loss"]),
    "examples/train_fsdp.sh": ("torch", [r"holds \d+ of \d+ parameters", r"reloaded: identical"]),
    "examples/deepspeed/run.slurm": ("deepspeed", [r"ZeRO-3, holds \d+ of \d+ parameters", r"done: final loss"]),
    "examples/megatron/run.slurm": ("megatron.core", [r"tensor-parallel rank 1", r"done: lm loss"]),
}


def _have(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except ImportError:
        return False


def _final_state(c, job_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = c.run(["squeue", "--noheader", "--states=all", "--jobs", job_id, "--format=%T"], check=False).stdout.strip()
        if out and out not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return out
        time.sleep(0.5)
    c.run(["scancel", job_id], check=False)
    return "TIMEOUT (test)"


TEARDOWN_ABORT = "terminate called without an active exception"
TEARDOWN_RETRIES = 3


def _result(c, script: str, job_id: str, tmp_path):
    """(final state, output, expected patterns missing from it) of one example job."""
    state = _final_state(c, job_id, 300)
    out_file = tmp_path / f"train_{job_id}.out"
    out = out_file.read_text() if out_file.exists() else "(no output file)"
    return state, out, [pat for pat in EXAMPLES[script][1] if not re.search(pat, out)]


@pytest.mark.skipif(not _have("torch"), reason="torch missing: make setup-train")
def test_examples_run_unchanged_with_sbatch(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    jobs = {}
    for script, (module, _) in EXAMPLES.items():
        if _have(module):
            proc = c.run(["sbatch", "--parsable", str(REPO / script)], cwd=tmp_path)
            jobs[script] = proc.stdout.strip()
    assert "examples/train_ddp.sh" in jobs
    failures = []
    for script, job_id in jobs.items():
        state, out, missing = _result(c, script, job_id, tmp_path)
        for _ in range(TEARDOWN_RETRIES):
            if state == "COMPLETED" or missing or TEARDOWN_ABORT not in out:
                break
            # torch's gloo teardown race (docs/verify.md): the work is done and printed, then a
            # rank aborts at exit, about 1 job in 15 on 2 cores (twice in a row seen once). The
            # example is a user's script, so it keeps its destroy_process_group(); it runs
            # again, and a run must pass in full.
            job_id = c.run(["sbatch", "--parsable", str(REPO / script)], cwd=tmp_path).stdout.strip()
            state, out, missing = _result(c, script, job_id, tmp_path)
        if state != "COMPLETED" or missing:
            failures.append(f"{script}: job {job_id} {state}, missing {missing}\n{out[-3000:]}")
    assert not failures, "\n\n".join(failures)
