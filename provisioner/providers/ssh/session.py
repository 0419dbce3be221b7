"""One SSH connection to a remote host (paramiko): connect, run a command, copy a file.

The only module of simcluster that talks to paramiko; everything else reaches a host
through SSHRunner (runner.py). Used by `status --ssh` and `verify --ssh` against
clusters made by `simcluster deploy`.
Authentication: a key file (--ssh-key) or, without one, the SSH agent and the default keys
in ~/.ssh. Host keys are checked against known_hosts by default (~/.ssh/known_hosts, or
--known-hosts FILE); --insecure-accept-host-key accepts unknown keys (test rigs only) but
still refuses a key that contradicts known_hosts. Every failure is one clear line.
"""

from __future__ import annotations

import getpass
import os
import re
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.command_runner import TIMED_OUT, Result
from provisioner.errors import PrerequisiteError, SimclusterError, UsageError

DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")


# Command channels open at once on one SSH connection (SFTP takes one more).
MAX_CHANNELS = 6
# A channel sshd refused is asked for again this many times (0.5 s, 1 s, 1.5 s apart).
OPEN_RETRIES = 3

class RemoteError(SimclusterError):
    """An SSH connection or remote command failed (exit 1)."""


class HostUnreachable(RemoteError):
    """The host does not answer on its SSH port."""


class AuthFailed(RemoteError):
    """The host refused every key we offered."""


class HostKeyError(RemoteError):
    """The host's key is unknown or does not match known_hosts."""


@dataclass(frozen=True)
class Target:
    """user@host[:port] as typed after --ssh."""

    user: str
    host: str
    port: int = 22

    def __str__(self) -> str:
        return f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")


def parse_target(text: str) -> Target:
    """Parse 'user@host', 'host', 'user@host:2222' or 'user@[::1]:2222'."""
    m = re.fullmatch(r"(?:([^@\s]+)@)?(\[[^\]]+\]|[^:@\s]+)(?::(\d+))?", text or "")
    if not m:
        raise UsageError(f"--ssh expects user@host[:port], got {text!r}")
    user = m.group(1) or getpass.getuser()
    host = m.group(2).strip("[]")
    port = int(m.group(3) or 22)
    if not 0 < port < 65536:
        raise UsageError(f"--ssh: port {port} is out of range 1-65535")
    return Target(user, host, port)


def _paramiko():
    try:
        import paramiko  # lazy: the deploy extra's paramiko loads only when an SSH connection is made
    except ImportError:
        raise PrerequisiteError("SSH support needs paramiko",
                                "pip install 'simcluster[deploy]'") from None
    return paramiko


class _AcceptUnknown:
    """Missing-host-key policy for --insecure-accept-host-key: accept, remember for this session only."""

    def missing_host_key(self, client, hostname, key):
        client.get_host_keys().add(hostname, key.get_name(), key)


class SSHSession:
    """One SSH connection: run commands, copy files. Use as a context manager."""

    def __init__(self, target: Target, key_file: Optional[str] = None, known_hosts: Optional[str] = None,
                 accept_unknown_host_key: bool = False, timeout: float = 10.0, via: Optional["SSHSession"] = None):
        self.target = target
        # A connected session whose host reaches ``target`` (ssh -J): the connection goes
        # through a direct-tcpip channel of its transport, so a host on the cluster's private
        # network is reached wherever its controller is. Host keys are still checked under
        # ``target``'s own address.
        self.via = via
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.accept_unknown = accept_unknown_host_key
        self.timeout = timeout
        self._client = None
        self._sftp = None
        # One SFTP channel serves every thread (verify runs checks side by side); its
        # requests are not meant to interleave, so they take turns.
        self._sftp_lock = threading.Lock()
        # sshd refuses more than MaxSessions (OpenSSH's default: 10) channels at once on one
        # connection ("open failed: Connect failed"); verify's checks side by side plus the
        # SFTP channel went past it. Commands take turns beyond this many.
        self._channels = threading.BoundedSemaphore(MAX_CHANNELS)
        self._forwards: Dict[Tuple[str, int], socket.socket] = {}

    # -- connecting -------------------------------------------------------------------------
    def _tried(self) -> str:
        if self.key_file:
            return f"key {self.key_file}"
        keys = [str(p) for p in (Path.home() / ".ssh" / k for k in DEFAULT_KEYS) if p.exists()]
        agent = "agent" if os.environ.get("SSH_AUTH_SOCK") else "no agent running"
        return ", ".join([f"key {k}" for k in keys] + [agent]) if keys else f"no key in ~/.ssh, {agent}"

    def connect(self) -> "SSHSession":
        paramiko = _paramiko()
        t = self.target
        where = f"{t.host}:{t.port}" + (f" (through {self.via.target.host})" if self.via is not None else "")
        if self.key_file and not Path(self.key_file).is_file():
            raise UsageError(f"SSH key {self.key_file} does not exist", "check --ssh-key")
        client = paramiko.SSHClient()
        if self.known_hosts:
            if not Path(self.known_hosts).is_file():
                raise UsageError(f"known_hosts file {self.known_hosts} does not exist", "check --known-hosts")
            client.load_host_keys(self.known_hosts)
        else:
            client.load_system_host_keys()
        client.set_missing_host_key_policy(_AcceptUnknown() if self.accept_unknown else paramiko.RejectPolicy())
        sock = self.via.tunnel(t.host, t.port) if self.via is not None else None
        try:
            client.connect(t.host, port=t.port, username=t.user, key_filename=self.key_file,
                           look_for_keys=self.key_file is None, allow_agent=self.key_file is None,
                           timeout=self.timeout, banner_timeout=self.timeout, auth_timeout=self.timeout, sock=sock)
        except socket.gaierror:
            raise HostUnreachable(f"cannot reach host {where}: the name does not resolve",
                                  "check the host name given to --ssh") from None
        except paramiko.BadHostKeyException:
            raise HostKeyError(f"host key of {where} does not match known_hosts: refusing to connect",
                               "if the host was reinstalled, remove its old key with ssh-keygen -R") from None
        except (paramiko.AuthenticationException, paramiko.SSHException) as exc:
            if not isinstance(exc, paramiko.AuthenticationException) and \
                    "No authentication methods available" not in str(exc):
                return self._other_ssh_error(exc, where)
            raise AuthFailed(f"authentication failed for {t.user}@{t.host} (tried {self._tried()})",
                             "pass the right key with --ssh-key, or load it into ssh-agent") from None
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            reason = "connection refused" if all(getattr(e, "errno", None) == 111 for e in exc.errors.values()) \
                else "; ".join(sorted({str(e) for e in exc.errors.values()}))
            raise HostUnreachable(f"cannot reach host {where}: {reason}", "is sshd running there?") from None
        except (socket.timeout, TimeoutError):
            raise HostUnreachable(f"cannot reach host {where}: no answer within {self.timeout:.0f}s") from None
        except EOFError:  # sshd closed the connection in the handshake (a host shutting down or booting)
            raise HostUnreachable(f"cannot reach host {where}: the connection closed during the SSH handshake") from None
        except OSError as exc:
            raise HostUnreachable(f"cannot reach host {where}: {exc.strerror or exc}") from None
        self._client = client
        return self

    def _other_ssh_error(self, exc, where: str):
        t = self.target
        if "not found in known_hosts" in str(exc):
            port = f"-p {t.port} " if t.port != 22 else ""
            scan = f"ssh-keyscan {port}{t.host}" + (f" on {self.via.target.host}" if self.via is not None else "")
            hint = (f"add it: {scan} >> {self.known_hosts or '~/.ssh/known_hosts'} after checking it, "
                    "or on a test rig pass --insecure-accept-host-key")
            raise HostKeyError(f"host key of {where} is not known (host key checking is on)", hint) from None
        raise RemoteError(f"SSH to {where} failed: {exc}") from None

    @property
    def connected(self) -> bool:
        """Connected, and the connection still up (not cut by a reboot of either end)."""
        transport = self._client.get_transport() if self._client is not None else None
        return transport is not None and transport.is_active()

    def __enter__(self) -> "SSHSession":
        return self.connect() if self._client is None else self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for listener in self._forwards.values():
            listener.close()
        self._forwards.clear()
        if self._sftp is not None:
            self._sftp.close()
        if self._client is not None:
            self._client.close()
        self._client = self._sftp = None

    # -- a port of the host's network, reached from here -----------------------------------
    def tunnel(self, host: str, port: int):
        """A channel to ``host:port`` as this session's host reaches it (a direct-tcpip channel:
        what ssh -J opens); a socket-like object for another session's ``via``."""
        paramiko = _paramiko()
        transport = self._client.get_transport() if self._client is not None else None
        if transport is None or not transport.is_active():
            raise HostUnreachable(f"cannot reach host {host}:{port}: the SSH connection to {self.target.host} is closed")
        try:
            return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=self.timeout)
        except paramiko.ChannelException as exc:  # sshd there could not connect (host down, port closed)
            raise HostUnreachable(f"cannot reach host {host}:{port} from {self.target.host}: "
                                  f"{exc.text or 'connect failed'}",
                                  "is the host up and its sshd running? (its address is the node's NodeAddr)") from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostUnreachable(f"cannot reach host {host}:{port} from {self.target.host}: {exc}") from None

    def forward(self, host: str, port: int) -> int:
        """A port on 127.0.0.1 of this machine whose connections go through this SSH connection
        to ``host:port`` as the remote host reaches it (ssh -L): services that listen only on
        the cluster's network (slurmrestd) are reached wherever SSH reaches the controller,
        with no port opened beyond SSH. One listener per destination, closed with the session."""
        assert self._client is not None, "connect() first"
        if (host, port) in self._forwards:
            return self._forwards[(host, port)].getsockname()[1]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        self._forwards[(host, port)] = listener
        threading.Thread(target=self._accept, args=(listener, host, port), daemon=True,
                         name=f"ssh-forward-{host}:{port}").start()
        return listener.getsockname()[1]

    def _accept(self, listener: socket.socket, host: str, port: int) -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except OSError:  # closed: the session ended
                return
            threading.Thread(target=self._pump, args=(conn, peer, host, port), daemon=True).start()

    def _pump(self, conn: socket.socket, peer, host: str, port: int) -> None:
        """Bytes both ways between a local connection and a direct-tcpip channel, until either closes."""
        channel = None
        try:
            with self._channels:
                transport = self._client.get_transport() if self._client is not None else None
                if transport is None:
                    return
                channel = transport.open_channel("direct-tcpip", (host, port), peer, timeout=self.timeout)
                ends = [conn, channel]
                while True:
                    ready, _, _ = select.select(ends, [], [], 60)
                    if not ready:
                        return  # idle a minute: a client that went away without closing
                    for end in ready:
                        data = end.recv(65536)
                        if not data:
                            return
                        (channel.sendall if end is conn else conn.sendall)(data)
        except (_paramiko().SSHException, EOFError, OSError):
            return  # the client sees its connection close: the same as a refused port
        finally:
            conn.close()
            if channel is not None:
                channel.close()

    # -- commands and files -------------------------------------------------------------------
    def run(self, argv: List[str], timeout: float = 60.0, stdin: Optional[str] = None) -> Result:
        """Run argv (quoted for the remote shell); return rc, stdout, stderr."""
        return self.run_shell(" ".join(shlex.quote(a) for a in argv), timeout=timeout, stdin=stdin)

    def run_shell(self, command: str, timeout: float = 60.0, stdin: Optional[str] = None) -> Result:
        """Run a shell command line on the host. Never raises for the command's sake: past
        ``timeout`` it is rc 124, a connection lost on the way rc 255 (as ssh(1) says it)."""
        assert self._client is not None, "connect() first"
        with self._channels:
            return self._run_shell(command, timeout, stdin)

    def _run_shell(self, command: str, timeout: float, stdin: Optional[str]) -> Result:
        channel = None
        try:
            chan_in, out, err = self._exec(command, timeout)
            channel = out.channel
            if stdin is not None:
                chan_in.write(stdin)
            chan_in.channel.shutdown_write()
            stdout = out.read().decode(errors="replace")
            stderr = err.read().decode(errors="replace")
            rc = out.channel.recv_exit_status()
        except (socket.timeout, TimeoutError):
            return Result([command], TIMED_OUT, "",
                          f"'{command[:60]}' on {self.target.host} did not finish within {timeout:.0f}s")
        except (_paramiko().SSHException, EOFError, OSError) as exc:
            return Result([command], 255, "", f"SSH to {self.target.host} failed: {exc}")
        finally:
            if channel is not None:
                channel.close()  # now, not when garbage-collected: sshd counts it until then
        return Result([command], rc, stdout, stderr)

    def _exec(self, command: str, timeout: float):
        """exec_command, tried again while sshd refuses the channel ("Connect failed"): a slow
        host (a VM under TCG) still counts sessions that were just closed against MaxSessions."""
        paramiko = _paramiko()
        for attempt in range(OPEN_RETRIES + 1):
            try:
                return self._client.exec_command(command, timeout=timeout)
            except paramiko.ChannelException:
                if attempt == OPEN_RETRIES:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def _sftp_client(self):
        if self._sftp is None:
            assert self._client is not None, "connect() first"
            self._sftp = self._client.open_sftp()
        return self._sftp

    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Create or replace ``path`` on the host (its directory must exist) with ``mode``."""
        with self._sftp_lock:
            sftp = self._sftp_client()
            with sftp.open(path, "wb") as fh:
                fh.chmod(mode)
                fh.write(data)

    def read_bytes(self, path: str) -> Optional[bytes]:
        """``path``'s bytes on the host, None when it does not exist or cannot be read."""
        with self._sftp_lock:
            try:
                with self._sftp_client().open(path, "rb") as fh:
                    return fh.read()
            except OSError:  # paramiko raises IOError/FileNotFoundError/PermissionError
                return None
