"""verify --suite faults SKIPs (never FAILs) where faults cannot be injected or detected fast."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provisioner.verify import faults
from provisioner.verify.outcome import CheckSkipped


@pytest.mark.parametrize("injector, reason", [
    (None, "fault injection needs a local, docker or deployed (--ssh) cluster"),
    (SimpleNamespace(fast=False), "needs up --fast-failure (a deployed cluster: failureDetection: fast in its spec)"),
])
@pytest.mark.parametrize("check", [faults.check_requeue_resume, faults.check_controller_restart,
                                   faults.check_accounting_outage])
def test_faults_checks_skip_with_a_one_line_reason(check, injector, reason):
    ctx = SimpleNamespace(target=SimpleNamespace(faults=injector))
    with pytest.raises(CheckSkipped) as exc:
        check(ctx)
    assert exc.value.reason == reason


def _client(*replies):
    from provisioner.cluster.model.command_runner import Result
    calls = []

    def run(argv, timeout=10):
        calls.append(argv)
        rc, err = replies[min(len(calls), len(replies)) - 1]
        return Result(list(argv), rc, "", err)
    return SimpleNamespace(client=SimpleNamespace(run=run)), calls


def test_release_tries_again_while_slurmctld_says_so(monkeypatch):
    monkeypatch.setattr(faults.time, "sleep", lambda s: None)
    busy = (1, "Job update not available right now, the DB index is being set, try again in a bit for job 7")
    ctx, calls = _client(busy, busy, (0, ""))
    faults._release(ctx, "7", deadline=faults.time.monotonic() + 60)
    assert calls == [["scontrol", "release", "7"]] * 3


def test_release_fails_the_check_at_once_on_another_error_and_at_the_deadline(monkeypatch):
    from provisioner.verify.outcome import CheckFailed
    monkeypatch.setattr(faults.time, "sleep", lambda s: None)
    ctx, calls = _client((1, "Invalid job id specified for job 7"))
    with pytest.raises(CheckFailed, match="scontrol release failed: Invalid job id"):
        faults._release(ctx, "7", deadline=faults.time.monotonic() + 60)
    assert len(calls) == 1
    ctx, calls = _client((1, "... try again in a bit"))
    with pytest.raises(CheckFailed, match="try again"):
        faults._release(ctx, "7", deadline=faults.time.monotonic() - 1)
