"""Parsing what Slurm prints, and the client's environment."""

from __future__ import annotations

from provisioner.cluster.model.command_runner import Result, Runner
from provisioner.cluster.model.slurm import SlurmClient, parse_oneliner, parse_registered_port, parse_sinfo


def test_sinfo_states_and_readiness():
    states = parse_sinfo("node1|idle|none\nnode2|down*|Not responding\nnode3|mixed|none\nbad line\n")
    assert states["node1"].ready and states["node3"].ready
    assert not states["node2"].ready and states["node2"].reason == "Not responding"
    assert "bad line" not in states


def test_oneliner_and_registered_port():
    rows = parse_oneliner("NodeName=a CPUTot=4 State=IDLE\nNodeName=b CPUTot=8\n")
    assert rows == [{"NodeName": "a", "CPUTot": "4", "State": "IDLE"}, {"NodeName": "b", "CPUTot": "8"}]
    assert parse_registered_port("c1|0\nc2|6817\n", "c2") == 6817
    assert parse_registered_port("c1|0\n", "c1") is None


class Recorder(Runner):
    where = "recorder"

    def __init__(self, out: str = "", rc: int = 0):
        self.calls = []
        self.out, self.rc = out, rc

    def run(self, argv, env=None, stdin=None, timeout=30.0, cwd=None):
        self.calls.append((list(argv), dict(env or {}), cwd))
        return Result(list(argv), self.rc, self.out, "sbatch: error: boom" if self.rc else "")


def test_client_passes_its_env_and_cwd_and_parses_sbatch():
    r = Recorder("42;cluster\n")
    client = SlurmClient(r, {"SLURM_CONF": "/c/slurm.conf"})
    assert client.sbatch("/shared/run/job.sh", ["-N2"], env={"X": "1"}) == "42"
    argv, env, cwd = r.calls[0]
    assert argv == ["sbatch", "--parsable", "-N2", "/shared/run/job.sh"]
    assert env == {"SLURM_CONF": "/c/slurm.conf", "X": "1"} and cwd == "/shared/run"


def test_client_reports_a_dead_controller_as_none():
    assert SlurmClient(Recorder(rc=1)).node_states() is None
    assert not SlurmClient(Recorder(rc=1)).ping()


def test_show_config_with_an_empty_value_keeps_the_next_line_apart():
    from provisioner.cluster.model.slurm import parse_show_config
    text = "PowerParameters         = (null)\nPowerPlugin             = \nPreemptMode             = REQUEUE\n"
    assert parse_show_config(text) == {"PowerParameters": "(null)", "PowerPlugin": "", "PreemptMode": "REQUEUE"}
