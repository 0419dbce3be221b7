"""verify/signals.py: where the 24-hour checkpoint job runs, and the signals suite's checks."""

from __future__ import annotations

from provisioner.verify.signals import day_partition, max_time_seconds
from provisioner.verify.suites import checks_for, parse_suites
from tests.unit.conftest import spec_from


def test_max_time_seconds():
    assert [max_time_seconds(t) for t in ("INFINITE", "UNLIMITED", "", "30", "00:30:00", "2-00:00:00")] == \
        [None, None, None, 1800.0, 1800.0, 172800.0]


def _spec(partitions):
    return spec_from({"apiVersion": "simcluster/v1", "kind": "Cluster", "name": "s",
                      "nodes": [{"name": "n1"}, {"name": "n2"}], "partitions": partitions})


def test_the_24_hour_job_goes_to_the_default_partition_when_it_allows_24_hours():
    spec = _spec([{"name": "main", "nodes": ["n1", "n2"], "default": True}])
    assert day_partition(spec) == ("main", "n1", "24:00:00")


def test_a_short_default_partition_is_passed_over_for_one_that_allows_a_day():
    spec = _spec([{"name": "debug", "nodes": ["n1"], "default": True, "maxTime": "00:30:00"},
                  {"name": "long", "nodes": ["n2"], "maxTime": "7-00:00:00"}])
    assert day_partition(spec) == ("long", "n2", "24:00:00")


def test_without_a_day_anywhere_the_longest_maxtime_is_used():
    spec = _spec([{"name": "debug", "nodes": ["n1"], "default": True, "maxTime": "00:30:00"},
                  {"name": "short", "nodes": ["n2"], "maxTime": "04:00:00"}])
    assert day_partition(spec) == ("short", "n2", "04:00:00")


def test_the_signals_suite_has_its_three_checks_and_is_in_all():
    names = [c.name for c in checks_for(parse_suites("signals"))]
    assert names == ["basic.controller", "basic.nodes", "signals.time-limit", "signals.checkpoint", "signals.preempt"]
    assert "signals" in parse_suites("all")
    assert not {"signals.checkpoint", "signals.preempt"} & {c.name for c in checks_for(["basic"])}


def test_all_runs_the_quick_signal_check_and_signals_named_runs_every_one():
    quick = [c.name for c in checks_for(parse_suites("all")) if c.suite == "signals"]
    assert quick == ["signals.time-limit"]  # "all" stays about a minute
    named = [c.name for c in checks_for(parse_suites("all,signals")) if c.suite == "signals"]
    assert named == ["signals.time-limit", "signals.checkpoint", "signals.preempt"]
    assert checks_for(["signals"]) == checks_for(parse_suites("signals"))  # a plain list names them all
