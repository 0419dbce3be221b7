"""SSHSession without a host: a channel sshd refuses ("Connect failed": a slow host still
counting closed sessions against MaxSessions) is asked for again; one refused every time is
a failed command (rc 255), never an exception."""

from __future__ import annotations

import io

import paramiko
import pytest

from provisioner.providers.ssh import session as ssh_session
from provisioner.providers.ssh.session import SSHSession, Target


class Channel:
    def recv_exit_status(self):
        return 0

    def shutdown_write(self):
        pass

    def close(self):
        pass


class Stream(io.BytesIO):
    channel = Channel()


class Client:
    """exec_command refused ``refusals`` times, then answers."""

    def __init__(self, refusals: int):
        self.refusals, self.calls = refusals, 0

    def exec_command(self, command, timeout=None):
        self.calls += 1
        if self.calls <= self.refusals:
            raise paramiko.ChannelException(2, "Connect failed")
        return Stream(), Stream(b"done\n"), Stream()


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(ssh_session.time, "sleep", lambda s: None)


def session_with(client) -> SSHSession:
    s = SSHSession(Target("runner", "127.0.0.1", 22))
    s._client = client
    return s


def test_a_refused_channel_is_asked_for_again():
    client = Client(refusals=2)
    res = session_with(client).run(["true"])
    assert (res.rc, res.stdout, client.calls) == (0, "done\n", 3)


def test_a_channel_refused_every_time_is_a_failed_command():
    client = Client(refusals=99)
    res = session_with(client).run(["true"])
    assert res.rc == 255 and "Connect failed" in res.stderr
    assert client.calls == ssh_session.OPEN_RETRIES + 1
