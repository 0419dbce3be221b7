"""The host runner: results instead of exceptions, one timeout convention, daemons, files."""

from __future__ import annotations

import signal
import socket
import time

from provisioner.cluster.model.command_runner import NOT_FOUND, TIMED_OUT, HostRunner


def test_run_returns_output_exit_code_and_env_without_raising():
    r = HostRunner({"PATH": "/usr/bin:/bin"})
    res = r.run(["sh", "-c", 'echo "$A"; echo err >&2; exit 3'], env={"A": "x"})
    assert (res.rc, res.stdout, res.stderr, res.ok) == (3, "x\n", "err\n", False)
    assert res.error_line() == "err"
    assert r.run(["cat"], stdin="in").stdout == "in"
    assert r.run(["pwd"], cwd="/tmp").stdout.strip() == "/tmp"


def test_timeouts_and_missing_programs_are_exit_codes():
    r = HostRunner()
    res = r.run(["sleep", "5"], timeout=0.2)
    assert res.rc == TIMED_OUT and "did not finish within" in res.stderr
    assert r.run(["no-such-program-xyz"]).rc == NOT_FOUND


def test_daemon_start_liveness_and_kill(tmp_path):
    r = HostRunner()
    log = tmp_path / "d.out"
    pid = r.start_daemon(["sh", "-c", "echo started; exec sleep 60"], str(log))
    deadline = time.monotonic() + 5
    while "started" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.pids_alive([pid]) == {pid: True} and r.pid_alive(pid)
    r.kill([pid], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while r.pid_alive(pid) and time.monotonic() < deadline:  # a zombie counts as dead
        time.sleep(0.01)
    assert not r.pid_alive(pid) and not r.pid_alive(0)


def test_files_and_listening_ports(tmp_path):
    r = HostRunner()
    path = str(tmp_path / "secret")
    r.write_file(path, b"x", 0o600)
    assert r.read_file(path) == b"x" and (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    assert r.read_file(str(tmp_path / "missing")) is None and not r.exists(str(tmp_path / "missing"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not r.listening(port)
        s.listen()
        assert r.listening(port)
