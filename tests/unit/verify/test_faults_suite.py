"""verify --suite faults SKIPs (never FAILs) where faults cannot be injected or detected fast."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provisioner.verify import faults
from provisioner.verify.outcome import CheckSkipped


@pytest.mark.parametrize("injector, reason", [
    (None, "fault injection needs a local or docker cluster"),
    (SimpleNamespace(fast=False), "needs up --fast-failure"),
])
@pytest.mark.parametrize("check", [faults.check_requeue_resume, faults.check_controller_restart,
                                   faults.check_accounting_outage])
def test_faults_checks_skip_with_a_one_line_reason(check, injector, reason):
    ctx = SimpleNamespace(target=SimpleNamespace(faults=injector))
    with pytest.raises(CheckSkipped) as exc:
        check(ctx)
    assert exc.value.reason == reason
