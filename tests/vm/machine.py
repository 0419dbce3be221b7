"""A throwaway qemu VM over a cached Debian image, driven over ssh.

    from tests.vm.image import build
    from tests.vm.machine import Machine

    with Machine(build("trixie"), workdir) as vm:       # boots; waits for ssh
        vm.put_checkout(REPO, "/root/simcluster")          # git ls-files + uncommitted changes
        res = vm.run("cd /root/simcluster && make setup", timeout=900)
        res.rc, res.stdout, res.stderr                     # a CompletedProcess
        vm.run("id", user="runner")                        # the non-root sudo user
        vm.collect_logs(dest)                              # serial log, journal, dmesg
    # gone: qemu stopped, its overlay and ssh master removed

How (checked on these machines, DESIGN.md "Facts checked 2026-11-28"):
- TCG, not KVM (/dev/kvm opens but its vCPUs hang): ``-accel tcg,tb-size=128 -cpu max``.
- Per run a qcow2 overlay (``cache=unsafe``) over the image's read-only base.raw: the cached
  image is never written, the overlay dies with the run.
- Kernel and initrd booted directly (-kernel/-initrd), console on the serial port into
  ``serial.log``: what the guest printed last is in every boot-timeout error.
- ssh to a ``hostfwd`` on 127.0.0.1 and a free port, one multiplexed connection
  (ControlMaster) per guest user for all of that user's commands: a command returns its output and exit code, the way
  testinfra's ssh backend does it. The cloud kernel has no 9p; files travel by ssh.
- Nothing left behind: qemu runs in a session (process group) of its own, with a pid file in
  the workdir and PR_SET_PDEATHSIG, so it dies with the test process even on SIGKILL; stop()
  (context exit, pytest finalizers, Ctrl-C) kills the group. QMP is not needed for that.
- The host's extra CA certificates (TLS to PyPI is intercepted here, and that CA is made anew
  when the machine starts) are copied in at each boot, not baked into the cached image.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Sequence, Union

from tests.vm.image import RUNNER_USER, Image

QEMU = "qemu-system-x86_64"
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")


class BootTimeout(RuntimeError):
    """The guest did not answer ssh in time (the message has the serial log's tail)."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def qemu_missing() -> Optional[str]:
    """Why this host cannot run the VMs, or None."""
    for tool in (QEMU, "qemu-img", "debootstrap", "mkfs.ext4", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            return f"{tool} is not installed (make setup-vm installs the VM tools)"
    if os.geteuid() != 0 and subprocess.run(["sudo", "-n", "true"], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL).returncode != 0:
        return "building the VM images needs root or passwordless sudo (debootstrap, chroot)"
    return None


class Machine:
    """One running VM. Use as a context manager, or start()/stop() (stop is idempotent)."""

    def __init__(self, image: Image, workdir: Union[str, Path], *, memory_mb: int = 1536,
                 cpus: int = 2, boot_timeout: float = 300.0) -> None:
        self.image = image
        self.workdir = Path(workdir)
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.boot_timeout = boot_timeout
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self.boot_seconds: Optional[float] = None
        self.disk_overlays: List[Path] = []  # attach_disk's

    # paths inside the workdir
    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    @property
    def overlay(self) -> Path:
        return self.workdir / "overlay.qcow2"

    @property
    def pidfile(self) -> Path:
        return self.workdir / "qemu.pid"

    @property
    def qmp_socket(self) -> Path:
        return self.workdir / "qmp.sock"

    def control_path(self, user: str = "root") -> Path:
        """The ssh master connection of ``user``: one per user (ssh's %r), so a command run
        as runner never rides root's connection."""
        return self.workdir / f"ssh-{user}.ctl"

    def __enter__(self) -> "Machine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # lifecycle
    def start(self) -> "Machine":
        return self.launch().wait_ready()

    def launch(self) -> "Machine":
        """Start qemu and return (the guest boots on); wait_ready() waits for it. Several
        machines launched one after the other boot at once. Call from the thread that lives as
        long as the VM: qemu dies with the thread that started it (PR_SET_PDEATHSIG)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                        str(self.image.disk), str(self.overlay)], check=True)
        started = time.monotonic()
        for attempt in range(3):  # the free port may be taken between choosing and binding it
            self.port = free_port()
            self.proc = subprocess.Popen(self._qemu_command(), preexec_fn=_die_with_parent,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=open(self.workdir / "qemu.stderr", "w"))
            self.pidfile.write_text(f"{self.proc.pid}\n")
            time.sleep(0.5)
            if self.proc.poll() is None or "hostfwd" not in self._qemu_stderr():
                break
        self._launched = started
        return self

    def wait_ready(self) -> "Machine":
        """Wait until the launched guest answers ssh; add the host's CAs. Stops it on failure."""
        started = self._launched
        try:
            self._wait_for_ssh(started)
            self._install_host_cas()
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = round(time.monotonic() - started, 1)
        return self

    def _qemu_command(self) -> List[str]:
        return [
            QEMU, "-accel", "tcg,tb-size=128", "-cpu", "max", "-smp", str(self.cpus),
            "-m", str(self.memory_mb), "-kernel", str(self.image.kernel),
            "-initrd", str(self.image.initrd),
            "-append", "root=/dev/vda rw console=ttyS0 quiet",
            "-drive", f"file={self.overlay},format=qcow2,if=virtio,cache=unsafe",
            "-nic", f"user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:{self.port}-:22",
            "-display", "none", "-serial", f"file:{self.serial_log}", "-monitor", "none",
            "-qmp", f"unix:{self.qmp_socket},server=on,wait=off",
            "-no-reboot", "-name", f"simcluster-vm-{self.image.suite}",
        ]

    def _qemu_stderr(self) -> str:
        try:
            return (self.workdir / "qemu.stderr").read_text(errors="replace")
        except OSError:
            return ""

    def serial_tail(self, lines: int = 25) -> str:
        try:
            text = self.serial_log.read_text(errors="replace")
        except OSError:
            return "(no serial log)"
        return "\n".join(text.rstrip().splitlines()[-lines:]) or "(serial log empty)"

    def _wait_for_ssh(self, started: float) -> None:
        deadline = started + self.boot_timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BootTimeout(f"qemu exited ({self.proc.returncode}) before the {self.image.suite} "
                                  f"guest answered ssh: {self._qemu_stderr().strip()}\n"
                                  f"serial log tail ({self.serial_log}):\n{self.serial_tail()}")
            res = self._ssh(["true"], timeout=30, connect_timeout=5, master=False)
            if res.returncode == 0:
                return
            last = res.stderr.strip()
            time.sleep(2)
        raise BootTimeout(f"the {self.image.suite} guest did not answer ssh on 127.0.0.1:{self.port} "
                          f"within {self.boot_timeout:.0f}s (last ssh error: {last or 'none'}); "
                          f"serial log tail ({self.serial_log}):\n{self.serial_tail()}")

    def _install_host_cas(self) -> None:
        cas = sorted(HOST_EXTRA_CAS.glob("*.crt")) if HOST_EXTRA_CAS.is_dir() else []
        if not cas:
            return
        data = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in cas)
        # Appended to the bundle at once (update-ca-certificates is slow under TCG) and kept in
        # /usr/local/share so a later update-ca-certificates in the guest keeps it; pip reads
        # the system bundle, as on this host.
        self.run("cat > /usr/local/share/ca-certificates/simcluster-vm-host.crt && "
                 "cat /usr/local/share/ca-certificates/simcluster-vm-host.crt "
                 ">> /etc/ssl/certs/ca-certificates.crt && "
                 "printf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n' > /etc/pip.conf",
                 input=data, check=True, timeout=60)

    def stop(self) -> None:
        """Stop qemu (its whole process group) and the ssh master; remove the overlay."""
        masters = sorted(self.workdir.glob("ssh-*.ctl"))
        if self.proc is not None and self.port is not None:
            for ctl in masters:
                subprocess.run(["ssh", "-o", f"ControlPath={ctl}", "-O", "exit", "vm"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        if self.proc is not None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                if self.proc.poll() is not None:
                    break
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    pass
            self.proc = None
        for path in (self.overlay, self.pidfile, self.qmp_socket, *self.disk_overlays, *masters):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # disks
    def _qmp(self, commands: Sequence[dict]) -> None:
        """Send ``commands`` to qemu's QMP socket in turn; raises on the first error."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            sock.connect(str(self.qmp_socket))
            stream = sock.makefile("rwb")
            json.loads(stream.readline())  # the greeting
            for command in [{"execute": "qmp_capabilities"}, *commands]:
                stream.write(json.dumps(command).encode() + b"\n")
                stream.flush()
                while True:
                    reply = json.loads(stream.readline() or b"{}")
                    if "event" not in reply:
                        break
                if "return" not in reply:
                    raise RuntimeError(f"qemu refused {command['execute']}: {reply.get('error', reply)}")

    def attach_disk(self, image: Union[str, Path], serial: str, timeout: float = 120) -> str:
        """Plug the raw disk image ``image`` into the running guest as a virtio disk (PCI
        hotplug through QMP), through a qcow2 overlay of its own in the workdir, so the file
        itself is never written; returns its device in the guest once it is there
        (/dev/disk/by-id/virtio-<serial>). Removed with the VM."""
        overlay = self.workdir / f"disk-{serial}.qcow2"
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image),
                        str(overlay)], check=True)
        self.disk_overlays.append(overlay)
        self._qmp([{"execute": "blockdev-add", "arguments": {
                        "driver": "qcow2", "node-name": serial, "cache": {"no-flush": True},
                        "file": {"driver": "file", "filename": str(overlay)}}},
                   {"execute": "device_add", "arguments": {
                        "driver": "virtio-blk-pci", "drive": serial, "id": serial, "serial": serial}}])
        device = f"/dev/disk/by-id/virtio-{serial}"
        self.run(f"for i in $(seq {int(timeout)}); do [ -b {device} ] && exit 0; sleep 1; done; "
                 f"echo 'no {device} after {int(timeout)}s'; exit 1", timeout=timeout + 30, check=True)
        return device

    # commands
    def _ssh_options(self, connect_timeout: int = 10, master: bool = True, user: str = "root") -> List[str]:
        opts = ["-i", str(self.image.key), "-p", str(self.port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=8"]
        if master:
            opts += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path(user)}",
                     "-o", "ControlPersist=600"]
        return opts

    def _ssh(self, argv: Sequence[str], *, user: str = "root", timeout: float = 600,
             input: Optional[bytes] = None, connect_timeout: int = 10, master: bool = True,
             text: bool = True) -> subprocess.CompletedProcess:
        cmd = ["ssh", *self._ssh_options(connect_timeout, master, user), f"{user}@127.0.0.1", "--", *argv]
        try:
            return _decode(subprocess.run(cmd, input=input if input is not None else b"",
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          timeout=timeout), text)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(cmd, 124, _text(exc.stdout),
                                               _text(exc.stderr) + f"\n(timed out after {timeout}s)")

    def run(self, command: Union[str, Sequence[str]], *, user: str = "root", timeout: float = 600,
            check: bool = False, input: Optional[bytes] = None) -> subprocess.CompletedProcess:
        """Run ``command`` in the guest (a shell string, or argv quoted for the shell) as ``user``.

        Returns a CompletedProcess with returncode, stdout and stderr (text); a command past
        ``timeout`` returns 124. With check=True a non-zero exit raises with its output."""
        if not isinstance(command, str):
            command = " ".join(shlex.quote(a) for a in command)
        res = self._ssh(["bash", "-lc", shlex.quote(command)], user=user, timeout=timeout, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"in the {self.image.suite} VM, `{command}` (as {user}) exited "
                                 f"{res.returncode}\nstdout:\n{res.stdout[-4000:]}\n"
                                 f"stderr:\n{res.stderr[-4000:]}")
        return res

    def pipe_in(self, local_argv: Sequence[str], command: str, *, user: str = "root",
                timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``command`` in the guest with the output of ``local_argv`` (run on this host) as
        its standard input, streamed: `docker save IMAGE` into `docker load` never holds the
        image in memory. Returns the guest command's result (124 past ``timeout``); a local
        command that fails makes it fail too, with that command's error in stderr."""
        src = subprocess.Popen(list(local_argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        cmd = ["ssh", *self._ssh_options(user=user), f"{user}@127.0.0.1", "--", "bash", "-lc",
               shlex.quote(command)]
        try:
            res = _decode(subprocess.run(cmd, stdin=src.stdout, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, timeout=timeout), True)
        except subprocess.TimeoutExpired as exc:
            res = subprocess.CompletedProcess(cmd, 124, _text(exc.stdout),
                                              _text(exc.stderr) + f"\n(timed out after {timeout}s)")
        finally:
            src.stdout.close()
            if src.poll() is None:
                src.kill()
            src_err = src.stderr.read().decode(errors="replace")
            src.stderr.close()
            src.wait()
        if src.returncode != 0 and res.returncode == 0:
            res.returncode = 1
        if src.returncode != 0:
            res.stderr += f"\n{' '.join(local_argv)} exited {src.returncode}: {src_err.strip()[-2000:]}"
        return res

    def put_checkout(self, src: Union[str, Path], dest: str, *, user: str = "root") -> int:
        """Copy a git work tree into the guest: tracked files as they are on disk (uncommitted
        changes included) and untracked files git does not ignore. Returns the file count."""
        src = Path(src)
        listed = subprocess.run(["git", "-C", str(src), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], stdout=subprocess.PIPE, check=True).stdout
        files = [f for f in listed.split(b"\0") if f and (src / os.fsdecode(f)).is_file()]
        tar = subprocess.run(["tar", "-C", str(src), "--null", "-T", "-", "-czf", "-"],
                             input=b"\0".join(files), stdout=subprocess.PIPE, check=True).stdout
        qdest = shlex.quote(dest)
        self.run(f"rm -rf {qdest} && mkdir -p {qdest} && tar -C {qdest} -xzf -", user=user,
                 input=tar, check=True, timeout=300)
        return len(files)

    def get_file(self, path: str, dest: Union[str, Path], *, user: str = "root") -> bool:
        """Copy one file out of the guest; False when it is not there."""
        res = self._ssh(["cat", shlex.quote(path)], user=user, timeout=300, text=False)
        if res.returncode != 0:
            return False
        Path(dest).write_bytes(res.stdout)
        return True

    def collect_logs(self, dest: Union[str, Path], extra: Sequence[str] = (),
                     guest_dirs: Sequence[str] = ()) -> Path:
        """Serial log, the guest's journal, dmesg and units, the output of each ``extra``
        command, and the guest directories ``guest_dirs`` (under dest/guest/) into ``dest``;
        as far as the guest still answers."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        if self.serial_log.exists():
            shutil.copy2(self.serial_log, dest / "serial.log")
        if self.proc is None or self.proc.poll() is not None:
            return dest
        for name, cmd in [("journal.txt", "journalctl -b --no-pager -o short-monotonic"),
                          ("dmesg.txt", "dmesg"),
                          ("units.txt", "systemctl list-units --all --no-pager")] + \
                [(f"extra-{i}.txt", c) for i, c in enumerate(extra)]:
            res = self.run(cmd, timeout=120)
            (dest / name).write_text(f"$ {cmd}\n(exit {res.returncode})\n{res.stdout}\n{res.stderr}")
        if guest_dirs:
            quoted = " ".join(shlex.quote(d) for d in guest_dirs)
            res = self._ssh(["bash", "-c", shlex.quote(f"tar -czf - --ignore-failed-read {quoted} "
                                                       f"2>/dev/null; true")],
                            timeout=300, text=False)
            if res.stdout:
                (dest / "guest").mkdir(exist_ok=True)
                subprocess.run(["tar", "-C", str(dest / "guest"), "-xzf", "-"], input=res.stdout,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return dest


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _decode(proc: subprocess.CompletedProcess, text: bool) -> subprocess.CompletedProcess:
    if text:
        proc.stdout, proc.stderr = _text(proc.stdout), _text(proc.stderr)
    return proc


__all__ = ["Machine", "BootTimeout", "RUNNER_USER", "free_port", "qemu_missing"]
