"""healthCheck: in the spec (config/validate.py) and what it renders: slurm.conf's
HealthCheck lines and the cluster's own health_check.sh (configs/templates/health_check.sh.j2),
and --like's mapping of a production health check (like/mapping.py)."""

from __future__ import annotations

import pytest

from provisioner.config.types import ClusterSpec, HealthCheckSpec
from provisioner.errors import ConfigError
from provisioner.like import mirror
from provisioner.render import render_all
from tests.unit.conftest import fixed_inputs, spec_from

GPUS = {"name": "hc", "fakeGpus": True, "nodes": [{"name": "node1", "gpus": [0, 1]}]}


@pytest.mark.parametrize("raw, want", [
    (None, None),
    (False, None),
    (True, HealthCheckSpec(interval=10, node_state="ANY", program=None)),
    ({"interval": 30, "nodeState": "idle,cycle"}, HealthCheckSpec(interval=30, node_state="IDLE,CYCLE")),
    ({"program": "/usr/sbin/nhc"}, HealthCheckSpec(program="/usr/sbin/nhc")),
])
def test_the_key_takes_a_switch_or_a_mapping(raw, want):
    spec = spec_from({**GPUS, **({} if raw is None else {"healthCheck": raw})})
    assert spec.health_check == want
    assert ClusterSpec.from_dict(spec.to_dict()) == spec  # kept in the state file as it is


def test_bad_values_are_reported_together():
    with pytest.raises(ConfigError) as err:
        spec_from({**GPUS, "healthCheck": {"interval": 0, "nodeState": "SOMETIMES", "program": "nhc", "every": 1}})
    text = "\n".join(err.value.problems)
    for says in ("healthCheck.interval: 0 is out of range 1-86400", "healthCheck.nodeState: expected one or more of",
                 "healthCheck.program: expected an absolute path", "unknown key 'every'"):
        assert says in text, text
    with pytest.raises(ConfigError, match="healthCheck: expected true, false or a mapping"):
        spec_from({**GPUS, "healthCheck": "yes"})


def test_slurm_conf_runs_the_clusters_own_check():
    files = render_all(spec_from({**GPUS, "healthCheck": {"interval": 5}}), fixed_inputs(spec_from(GPUS)))
    conf = files["slurm.conf"]
    assert "HealthCheckProgram=/state/x/etc/health_check.sh\nHealthCheckInterval=5\nHealthCheckNodeState=ANY\n" in conf
    script = files["health_check.sh"]
    assert script.startswith("#!/bin/sh\n")
    assert 'SLURM_CONF="/state/x/etc/slurm.conf"' in script
    assert 'exec python3 "/state/x/etc/bin/gpu-health-check" --config-dir "/state/x/etc"' in script


def test_a_program_of_its_own_gets_no_script_and_none_gets_no_lines():
    files = render_all(spec_from({**GPUS, "healthCheck": {"program": "/usr/sbin/nhc", "interval": 300}}),
                       fixed_inputs(spec_from(GPUS)))
    assert "HealthCheckProgram=/usr/sbin/nhc\nHealthCheckInterval=300\n" in files["slurm.conf"]
    assert "health_check.sh" not in files
    plain = render_all(spec_from(GPUS), fixed_inputs(spec_from(GPUS)))
    assert "HealthCheck" not in plain["slurm.conf"] and "health_check.sh" not in plain


def conf(tmp_path, lines: str):
    path = tmp_path / "slurm.conf"
    path.write_text(lines + "NodeName=gpu1 CPUs=8 RealMemory=16000 Gres=gpu:2\nPartitionName=p Nodes=gpu1\n")
    return mirror(str(path))


def test_like_keeps_a_production_program_that_is_on_this_machine(tmp_path):
    m = conf(tmp_path, "HealthCheckProgram=/bin/true\nHealthCheckInterval=300\nHealthCheckNodeState=ANY,CYCLE\n")
    assert m.raw["healthCheck"] == {"interval": 300, "nodeState": "ANY,CYCLE", "program": "/bin/true"}
    assert {"HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState"} <= set(m.report.kept_keys())
    assert spec_from(m.raw).health_check == HealthCheckSpec(interval=300, node_state="ANY,CYCLE", program="/bin/true")


def test_like_runs_its_own_check_where_the_program_is_not_here_and_says_so(tmp_path):
    m = conf(tmp_path, "HealthCheckProgram=/usr/sbin/nhc-not-here\nHealthCheckInterval=600\n")
    assert m.raw["healthCheck"] == {"interval": 600, "nodeState": "ANY"}
    assert any("HealthCheckProgram /usr/sbin/nhc-not-here is not on this machine" in n for n in m.report.notes)


@pytest.mark.parametrize("lines", ["HealthCheckProgram=/bin/true\n",  # Slurm's interval 0: never runs
                                   "HealthCheckProgram=/bin/true\nHealthCheckInterval=0\n",
                                   "HealthCheckInterval=300\n"])
def test_like_mirrors_no_check_where_production_runs_none(tmp_path, lines):
    m = conf(tmp_path, lines)
    assert "healthCheck" not in m.raw
    assert "runs no health check" in " ".join(m.report.dropped_keys().values())
