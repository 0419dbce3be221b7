"""The one error hierarchy (provisioner/errors.py): the one line a user reads, and the exit
code each kind of error gives."""

from __future__ import annotations

from provisioner.errors import (ClusterConflict, ClusterNotFound, ConfigError, PrerequisiteError, SimclusterError,
                                StartupError, UsageError)


def test_one_line_joins_the_hint_and_the_doc():
    assert SimclusterError("it broke").one_line() == "it broke"
    assert SimclusterError("it broke", "do this").one_line() == "it broke (do this)"
    err = SimclusterError("it broke", "do this", doc="docs/x.md#y")
    assert err.one_line() == "it broke (do this; see docs/x.md#y)"
    assert str(err) == "it broke"  # the exception's own text is the message alone


def test_exit_codes_bad_input_2_everything_else_1():
    assert UsageError("x").exit_code == 2 and PrerequisiteError("x").exit_code == 2
    assert ClusterConflict("x").exit_code == 2
    assert SimclusterError("x").exit_code == 1 and StartupError("x").exit_code == 1
    assert ClusterNotFound("x").exit_code == 1


def test_kinds_carry_their_troubleshooting_section():
    assert PrerequisiteError("no slurmd").one_line().endswith("(see docs/troubleshooting.md)")
    assert "docs/troubleshooting.md#a-cluster-does-not-come-up" in StartupError("timed out").one_line()
    assert UsageError("bad").doc is None


def test_config_error_says_one_problem_inline_and_many_as_a_list():
    one = ConfigError(["nodes: must be at least 1"])
    assert one.message == "invalid cluster spec: nodes: must be at least 1" and one.details == ""
    many = ConfigError(["a: bad", "b: worse"], source="cluster.yaml")
    assert many.message == "invalid cluster.yaml: 2 problems"
    assert many.details.splitlines() == ["  - a: bad", "  - b: worse"]
    assert many.problems == ["a: bad", "b: worse"] and many.exit_code == 2
