"""examples/pytest, the client project of docs/pytest.md, passes as it is and leaves nothing running."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.plugin.test_pytest_plugin import inner_pytest, leftovers, outcomes

pytestmark = pytest.mark.integration


def test_example_project_passes_and_leaves_nothing(sim_home):
    proc = inner_pytest(REPO / "examples" / "pytest", sim_home, {}, "-q", timeout=600)
    assert outcomes(proc.stdout) == {"passed": 3}, proc.stdout
    assert leftovers(sim_home) == []
