"""Faults of a cluster made by `simcluster deploy`, injected on its systemd hosts over SSH.

`simcluster fault ... --ssh USER@HOST` and `verify --ssh --suite faults` use SSHFaults: the
same verbs as on local and docker clusters (cluster/faults/registry.py), done as an
administrator would on real hosts, as the --ssh user with passwordless ``sudo -n``:

  kill NODE          systemctl kill -s KILL slurmd.service and the job steps (slurmstepd.scope,
                     then any slurmstepd left): a crashed host's Slurm. Debian's unit has no
                     Restart=, so slurmd stays down and Slurm marks the node DOWN.
  reboot NODE        the host reboots (systemd-run --on-active=1 systemctl reboot): waits for
                     SSH with a new boot id, then for the node to answer Slurm again.
  kill-controller    SIGKILL slurmctld; stop-accounting: SIGKILL slurmdbd (systemctl kill).
  drain NODE         scontrol, its reason marked (DRAIN_MARK) so that heal can tell it.
  heal [NODE]        starts every enabled unit of the cluster that is not running, on every
                     host (or NODE's), resumes the nodes Slurm left DOWN or drained after a
                     fault, and waits until they answer. Stateless: a deployed cluster has no
                     state file here; what is in effect is read from systemd and Slurm.

The controller's host is the --ssh connection; a compute host is a second SSH connection
jumped through it (SSHSession ``via``) to the node's NodeAddr, port 22, as the same user with
the same key, its host key checked under that address. Never srun: a busy node would make it
wait. The job faults (time-limit, preempt) are Slurm commands and run as everywhere.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import time
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.cluster.faults import jobfaults
from provisioner.cluster.faults.registry import JOB, SLURM_FAULT_DRAINS, fault_named
from provisioner.cluster.model.command_runner import DEFAULT_TIMEOUT, Result
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.slurm import NodeState, SlurmClient
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.errors import SimclusterError, UsageError
from provisioner.progress import Progress
from provisioner.providers.ssh.remote_runners import SSHRunner
from provisioner.providers.ssh.session import HostKeyError, RemoteError, SSHSession, Target
from provisioner.providers.ssh.units import host_units

# The verbs a deployed cluster has (the others need this machine's processes or containers).
SSH_VERBS = ("kill", "reboot", "drain", "kill-controller", "stop-accounting", "heal", "time-limit", "preempt")
# Appended to a drain's reason: heal resumes only the drains `fault drain` made (there is no
# state file to remember them by), never an administrator's.
DRAIN_MARK = "[simcluster fault]"
# Slurm's own reasons for a node a crash or a reboot left DOWN (heal resumes these too).
SLURM_DOWN_REASONS = ("Not responding", "Node unexpectedly rebooted") + SLURM_FAULT_DRAINS
NO_SUDO_RC = 77  # what the scripts exit with where sudo -n asks for a password
NO_SYSTEMD_RC = 78  # ... where the host does not run systemd (a container the roles run daemons in)
ON_SYSTEMD = f"[ -d /run/systemd/system ] || exit {NO_SYSTEMD_RC}; "
REBOOT_TIMEOUT_S = 600.0


def _sudo(script: str) -> str:
    """``script`` (a shell line of sudo -n commands) after a check that sudo needs no password."""
    return f"{ON_SYSTEMD}sudo -n true 2>/dev/null || exit {NO_SUDO_RC}; {script}"


def kill_node_script() -> str:
    """SIGKILL slurmd and every job step on the host, with the job's tasks; prints slurmd's
    unit state after it. Slurm 22.05 with cgroup/v2 puts the steps and their tasks in a scope
    of their own outside slurmd's unit (NODE_slurmstepd.scope, or slurmstepd.scope): every
    such scope (a pattern: it matches none on cgroup v1 hosts), then any slurmstepd left."""
    return _sudo("sudo -n systemctl kill -s KILL slurmd.service; "
                 "sudo -n systemctl kill -s KILL '*slurmstepd.scope'; "
                 "sudo -n pkill -KILL -x slurmstepd; sleep 1; systemctl is-active slurmd.service; true")


# slurmd's state, and how many job processes (slurmstepd and tasks) run: those in Slurm's
# cgroup v2 scope but its 'slurmstepd infinity' (which dies all the same, as on a crashed
# host), else (cgroup v1) the slurmstepd processes.
STEPS_BEFORE_KILL = (ON_SYSTEMD + "systemctl is-active slurmd.service; "
                     "n=$(find /sys/fs/cgroup -path '*slurmstepd.scope*' -name cgroup.procs -exec cat {} + "
                     "2>/dev/null | wc -l); if [ \"$n\" -gt 0 ]; then echo $((n - 1)); "
                     "else pgrep -x slurmstepd | wc -l; fi")


def kill_unit_script(unit: str) -> str:
    return _sudo(f"systemctl is-active -q {unit} || exit 3; sudo -n systemctl kill -s KILL {unit}.service")


def heal_script(units: Tuple[str, ...]) -> str:
    """Start every unit of ``units`` that is enabled here but not running; print `started U`
    or `failed U` for each one it tried."""
    return _sudo("for u in " + " ".join(units) + "; do "
                 '[ "$(systemctl is-enabled "$u" 2>/dev/null)" = enabled ] || continue; '
                 'systemctl is-active -q "$u" && continue; '
                 'if sudo -n systemctl start "$u"; then echo "started $u"; else echo "failed $u"; fi; done')


BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
REBOOT = _sudo("sudo -n systemd-run --quiet --on-active=1 systemctl reboot")


def local_address_script(addr: str) -> str:
    """Prints `local` where ``addr`` (a NodeAddr: address or name) is this host."""
    return (f"a={shlex.quote(addr)}; for i in $(getent ahosts \"$a\" | awk '{{print $1}}' | sort -u); do "
            "case \"$i\" in 127.*|::1) echo local; exit;; esac; "
            "for j in $(hostname -I); do [ \"$i\" = \"$j\" ] && echo local && exit; done; done; "
            "[ \"$a\" = \"$(hostname -s)\" ] && echo local; true")


def parse_started(text: str) -> Tuple[List[str], List[str]]:
    """(units started, units that failed to start) from heal_script's output."""
    started, failed = [], []
    for line in text.splitlines():
        word, _, unit = line.strip().partition(" ")
        if word == "started" and unit:
            started.append(unit)
        elif word == "failed" and unit:
            failed.append(unit)
    return started, failed


def parse_boot_id(text: str) -> str:
    """The boot id in ``text`` (a UUID), "" if there is none."""
    m = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text or "")
    return m.group(0) if m else ""


def seconds_of(value: Optional[str]) -> Optional[int]:
    """'5 sec' (scontrol show config) -> 5."""
    m = re.match(r"\s*(\d+)", value or "")
    return int(m.group(1)) if m else None


def detects_fast(config: Dict[str, str]) -> bool:
    """``config`` (scontrol show config) has a SlurmdTimeout at most failureDetection: fast's."""
    from provisioner.render import TIMEOUTS  # lazy: the renderer (jinja) loads only where this is asked
    timeout = seconds_of(config.get("SlurmdTimeout"))
    return timeout is not None and timeout <= TIMEOUTS["fast"]["slurmd"]


def check_available(verb: str) -> None:
    """A one-line UsageError (exit 2) for a fault a deployed cluster does not have; before any
    connection is made."""
    fault = fault_named(verb)
    if fault.target != JOB and fault.verb not in SSH_VERBS:
        raise not_available(fault.verb)


def down_after_fault(state: NodeState) -> bool:
    """A node DOWN or drained for a reason Slurm gives a crashed or rebooted node (or marked by
    `fault drain`), which heal resumes; an administrator's drain is not."""
    st = state.state.lower()
    if not (st.startswith("down") or "drain" in st):
        return False
    return state.reason.endswith(DRAIN_MARK) or any(state.reason.startswith(r) for r in SLURM_DOWN_REASONS)


def not_available(verb: str) -> UsageError:
    return UsageError(f"fault {verb} is not available on a deployed cluster (--ssh); available: {', '.join(SSH_VERBS)}")


def as_root(argv, env=None, user: str = "") -> List[str]:
    """``argv`` (with ``env``) run as root through ``sudo -n`` (not for root itself): the
    variables go after sudo, which would drop them."""
    if user == "root":
        return [*(["env", *(f"{k}={v}" for k, v in env.items())] if env else []), *argv]
    return ["sudo", "-n", *(["env", *(f"{k}={v}" for k, v in env.items())] if env else []), *argv]


class AdminRunner(SSHRunner):
    """The controller, its commands run as root: Slurm's operator commands (scontrol update
    of a node or another's job, requeue) refuse an ordinary user, and the --ssh user is
    rarely a Slurm operator, but has sudo."""

    def run(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None) -> Result:
        return super().run(as_root([str(a) for a in argv], env, self.session.target.user), None, stdin, timeout, cwd)


@contextlib.contextmanager
def quiet_paramiko():
    """paramiko's transport thread logs every refused handshake with its traceback (to stderr,
    through logging's last resort): while a host boots, each try would print one."""
    logger = logging.getLogger("paramiko")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class SSHFaults:
    """The faults of the deployed ``cluster`` (a Cluster of the ssh provider), as an object
    with the methods of named_clusters.Injector (kill, reboot, kill_controller,
    stop_accounting, drain, heal, time_limit, preempt) and ``fast``."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        session = getattr(cluster.provider.controller(), "session", None)
        if session is None:
            raise UsageError("faults on a deployed cluster need its controller over SSH: pass --ssh USER@HOST")
        self.session: SSHSession = session
        self.admin = SlurmClient(AdminRunner(session), poll_s=cluster.provider.poll_s)  # scontrol update ... as root
        self._hosts: Dict[str, SSHSession] = {}  # NodeAddr -> jumped session
        self._on_controller: Dict[str, bool] = {}

    # -- what the cluster is ----------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def config(self) -> Dict[str, str]:
        return self.cluster.state.provider_data.get("config", {})

    @property
    def fast(self) -> bool:
        """The controller detects dead nodes fast (failureDetection: fast)."""
        return detects_fast(self.config)

    def node_addr(self, node: str) -> str:
        self._check_node(node)
        return self.cluster.state.provider_data.get("node_addrs", {}).get(node) or node

    def _check_node(self, node: str) -> None:
        names = self.cluster.node_names
        if node not in names:
            raise UsageError(f"unknown node '{node}' in cluster '{self.name}' (nodes are: {', '.join(names[:8])})")

    def on_controller(self, node: str) -> bool:
        """Node ``node`` runs on the controller's host (its NodeAddr is the --ssh host, or one
        of that host's own addresses or names)."""
        addr = self.node_addr(node)
        if addr not in self._on_controller:
            if addr == self.session.target.host:
                self._on_controller[addr] = True
            else:
                res = self.session.run_shell(local_address_script(addr), timeout=30)
                self._on_controller[addr] = res.stdout.strip() == "local"
        return self._on_controller[addr]

    def host(self, node: str) -> SSHSession:
        """The SSH session of ``node``'s host: the controller's, or one jumped through it."""
        if self.on_controller(node):
            return self.session
        addr = self.node_addr(node)
        sess = self._hosts.get(addr)
        if sess is None or not sess.connected:
            if sess is not None:
                sess.close()
            sess = self._hosts[addr] = self._jumped(addr).connect()
        return sess

    def _jumped(self, addr: str) -> SSHSession:
        s = self.session
        return SSHSession(Target(s.target.user, addr, 22), key_file=s.key_file, known_hosts=s.known_hosts,
                          accept_unknown_host_key=s.accept_unknown, timeout=s.timeout, via=s)

    def close(self) -> None:
        for sess in self._hosts.values():
            sess.close()
        self._hosts.clear()

    def _where(self, node: str) -> str:
        return f"{node}'s host {self.node_addr(node)}"

    def _run(self, sess: SSHSession, script: str, what: str, timeout: float = 60.0):
        res = sess.run_shell(script, timeout=timeout)
        if res.rc == NO_SUDO_RC:
            raise UsageError(f"{sess.target.user} on {sess.target.host} cannot use sudo without a password: {what} "
                             "needs it", "give the --ssh user passwordless sudo (the deploy's become user has it)")
        if res.rc == NO_SYSTEMD_RC:
            raise UsageError(f"{sess.target.host} does not run systemd: {what} over --ssh acts on the hosts' systemd "
                             "units", "faults over --ssh need hosts deployed with systemd (docs/faults.md)")
        if res.rc == 255:
            raise RemoteError(res.stderr.strip() or f"SSH to {sess.target.host} failed")
        return res

    def _check_running(self) -> None:
        if self.cluster.state.phase != "running":
            err = self.cluster.state.provider_data.get("controller_error") or "no answer"
            raise UsageError(f"slurmctld of cluster '{self.name}' does not answer ({err}): nothing to inject a fault into",
                             f"bring it back: simcluster fault heal --ssh {self.session.target}")

    # -- the verbs ------------------------------------------------------------------------------
    def inject(self, verb: str, *args, **kwargs) -> str:
        """Fault ``verb`` with ``args``, as Injector.inject does on a local cluster."""
        fault = fault_named(verb)
        check_available(fault.verb)
        return getattr(self, fault.method)(*args, **kwargs)

    def kill(self, node: str) -> str:
        self._check_running()
        self._check_node(node)
        sess = self.host(node)
        before = self._run(sess, STEPS_BEFORE_KILL, "kill")
        words = before.stdout.split()
        if not words or words[0] != "active":
            raise UsageError(f"slurmd on {self._where(node)} is not running ({words[0] if words else '?'})",
                             f"start it again: simcluster fault heal {node} --ssh {self.session.target}")
        steps = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        res = self._run(sess, kill_node_script(), "kill")
        if res.stdout.strip().splitlines()[-1:] == ["active"]:
            raise SimclusterError(f"slurmd on {self._where(node)} still runs after systemctl kill: {res.error_line()}")
        return (f"killed node {node} on {self.node_addr(node)}: slurmd and {steps} job processes (SIGKILL, "
                f"systemctl kill); its unit stays down, Slurm marks {node} DOWN after SlurmdTimeout "
                f"({self.config.get('SlurmdTimeout', '?')})")

    def kill_controller(self) -> str:
        self._check_running()
        res = self._run(self.session, kill_unit_script("slurmctld"), "kill-controller")
        if res.rc == 3:
            raise UsageError("slurmctld is not running", f"simcluster fault heal --ssh {self.session.target}")
        if not res.ok:
            raise SimclusterError(f"killing slurmctld failed: {res.error_line()}")
        return "killed slurmctld (SIGKILL, systemctl kill); running jobs go on, its saved state is kept for the restart"

    def stop_accounting(self) -> str:
        if not self.cluster.spec.accounting:
            raise UsageError(f"cluster '{self.name}' has no accounting", "deploy it with accounting: true in its spec")
        res = self._run(self.session, kill_unit_script("slurmdbd"), "stop-accounting")
        if res.rc == 3:
            raise UsageError("slurmdbd is not running on the controller's host",
                             f"simcluster fault heal --ssh {self.session.target}")
        if not res.ok:
            raise SimclusterError(f"killing slurmdbd failed: {res.error_line()}")
        return "stopped slurmdbd (SIGKILL, systemctl kill); jobs keep running, slurmctld keeps their records until it is back"

    def drain(self, node: str, reason: str = "slurm_faults") -> str:
        self._check_running()
        self._check_node(node)
        res = self.admin.run(["scontrol", "update", f"nodename={node}", "state=drain",
                                       f"reason={reason} {DRAIN_MARK}"], timeout=20)
        if not res.ok:
            raise UsageError(f"draining {node} failed: {res.error_line()}")
        return f"drained node {node} (reason: {reason})"

    def reboot(self, node: str, timeout: Optional[float] = None, progress: Progress = lambda line: None) -> str:
        """Reboot ``node``'s host; return once it answers SSH with a new boot id and Slurm sees
        the node answer again (on the controller's host: slurmctld too)."""
        self._check_node(node)
        timeout = timeout or REBOOT_TIMEOUT_S
        on_ctl = self.on_controller(node)
        addr = self.node_addr(node)
        sess = self.host(node)
        old = parse_boot_id(self._run(sess, BOOT_ID, "reboot").stdout)
        res = self._run(sess, REBOOT, "reboot")
        if not res.ok:
            raise SimclusterError(f"rebooting {self._where(node)} failed: {res.error_line()}")
        t0 = time.monotonic()
        deadline = t0 + timeout
        what = f"{node}'s host {addr}" + (" (the controller's)" if on_ctl else "")
        progress(f" - rebooting {what}: waiting for SSH with a new boot id")
        with quiet_paramiko():
            self._back_with_new_boot(node, old, deadline, progress, t0)
        t_ssh = time.monotonic() - t0
        progress(f" - {addr} answers SSH again after {t_ssh:.1f}s")
        t1 = time.monotonic()
        if on_ctl:
            self._controller_answers(deadline, progress)
        state = self._node_answers([node], deadline, progress, t1, guard=lambda: self._slurmd_not_failed(node))[node]
        return (f"rebooted {node}'s host: ssh back after {t_ssh:.1f}s, {node} {state.state} "
                f"{time.monotonic() - t1:.1f}s later")

    def _back_with_new_boot(self, node: str, old: str, deadline: float, progress: Progress, t0: float) -> None:
        on_ctl = self.on_controller(node)
        addr = self.node_addr(node)
        last_said = time.monotonic()
        seen = ""
        while True:
            time.sleep(2.0)
            try:
                if on_ctl:
                    self.close()  # the compute hosts' connections went through the old one
                    self.session.close()
                    self.session.connect()
                    sess = self.session
                else:
                    stale = self._hosts.pop(addr, None)
                    if stale is not None:
                        stale.close()
                    sess = self.host(node)
                seen = parse_boot_id(sess.run_shell(BOOT_ID, timeout=20).stdout)
                if seen and seen != old:
                    return
            except HostKeyError:
                raise
            except RemoteError as exc:
                seen = exc.message
            if time.monotonic() > deadline:
                raise SimclusterError(f"{node}'s host {addr} did not come back from its reboot within "
                                      f"{deadline - t0:.0f}s (last: {seen or 'no answer'})",
                                      "look at its console; 'fault heal --ssh ...' once it is back")
            if time.monotonic() - last_said > 15:
                progress(f" - still waiting for {addr} ({time.monotonic() - t0:.0f}s)")
                last_said = time.monotonic()

    def _controller_answers(self, deadline: float, progress: Progress) -> None:
        client = self.cluster.client
        t0 = time.monotonic()
        try:
            poll_until(lambda: (client.ping(timeout=15), "no answer"), max(1.0, deadline - time.monotonic()),
                       first_delay=1.0, max_delay=3.0, factor=1.5)
        except WaitTimeout:
            raise SimclusterError("slurmctld does not answer after the controller's reboot",
                                  f"see its log on {self.session.target.host}: journalctl -u slurmctld") from None
        self.cluster.state.phase = "running"
        progress(f" - slurmctld answers ({time.monotonic() - t0:.1f}s)")

    def _slurmd_not_failed(self, node: str) -> None:
        """Raise at once where slurmd of ``node``'s host failed (at boot): the node will not
        come back by waiting."""
        res = self.host(node).run_shell("systemctl is-active slurmd.service", timeout=20)
        if res.stdout.strip() == "failed":
            raise SimclusterError(f"slurmd on {self._where(node)} failed after the reboot, so {node} stays down",
                                  f"see 'journalctl -b -u slurmd' there; 'simcluster fault heal {node} --ssh "
                                  f"{self.session.target}' starts it again")

    def _node_answers(self, nodes: List[str], deadline: float, progress: Progress, t0: float,
                      resumed: Optional[List[str]] = None,
                      ready: Callable[[NodeState], bool] = lambda s: s.ready,
                      guard: Optional[Callable[[], None]] = None) -> Dict[str, NodeState]:
        """Wait until ``ready`` holds for every one of ``nodes`` (default: it answers Slurm and
        takes jobs: idle, mixed, allocated; no '*'); resume, once, one a fault left DOWN or
        drained (its slurmd runs again by now: a reboot starts it, heal has started it)."""
        client = self.cluster.client
        tried: set = set()
        resumed = resumed if resumed is not None else []

        last_guard = [time.monotonic()]

        def check():
            if guard is not None and time.monotonic() - last_guard[0] > 10:
                guard()  # every 10 s: one more SSH round trip
                last_guard[0] = time.monotonic()
            states = client.node_states(timeout=20) or {}
            for n in nodes:
                s = states.get(n)
                if s is not None and n not in tried and down_after_fault(s):
                    tried.add(n)
                    if self.admin.run(["scontrol", "update", f"nodename={n}", "state=resume"], timeout=20).ok:
                        resumed.append(f"resumed {n} (Slurm had it {s.state}: {s.reason})")
            return all(n in states and ready(states[n]) for n in nodes), states
        try:
            states = poll_until(check, max(1.0, deadline - time.monotonic()), first_delay=0.5, max_delay=3.0,
                                factor=1.5)
        except WaitTimeout as exc:
            seen = exc.last_seen or {}
            shown = ", ".join(f"{n} {seen[n].state}" + (f" ({seen[n].reason})" if seen[n].reason else "")
                              if n in seen else f"{n} ?" for n in nodes)
            raise SimclusterError(f"nodes do not answer Slurm: {shown}",
                                  "see slurmd's log on the hosts: journalctl -u slurmd") from None
        progress(f" - waiting for {len(nodes)} node{'s' if len(nodes) != 1 else ''} to take jobs ... done "
                 f"({time.monotonic() - t0:.2f}s)")
        return states

    def heal(self, timeout: Optional[float] = None, progress: Progress = lambda line: None,
             node: Optional[str] = None) -> str:
        """Start every enabled unit that is not running on the cluster's hosts (``node``:
        only on its host), resume the nodes a fault left DOWN or drained, wait until they
        answer. Says what it did."""
        deadline = time.monotonic() + (timeout or 120.0)
        done: List[str] = []
        failed: List[str] = []
        waited = 0  # the lines of done before slurmctld was last seen answering
        if self.cluster.state.phase != "running":
            # slurmctld down: the nodes are known only once it answers again.
            done += self._start_units(self.session, "the controller", failed, compute=False)
            self._controller_answers(deadline, progress)
            self._rediscover()
            waited = len(done)
        if node is not None:
            self._check_node(node)
        nodes = [node] if node is not None else list(self.cluster.node_names)
        # One visit per host, the controller's first (slurmctld before the nodes register).
        hosts: Dict[str, List[str]] = {}
        ctl_nodes = [n for n in self.cluster.node_names if self.on_controller(n)]
        if node is None or node in ctl_nodes:
            hosts[self.session.target.host] = [n for n in ctl_nodes if n in nodes]
        for n in nodes:
            if n not in ctl_nodes:
                hosts.setdefault(self.node_addr(n), []).append(n)
        unreachable: List[str] = []
        for addr, on in hosts.items():
            label = "/".join(on) or "the controller"
            try:
                sess = self.session if addr == self.session.target.host else self.host(on[0])
            except HostKeyError:
                raise
            except RemoteError as exc:
                unreachable.append(f"{label} ({exc.message})")
                nodes = [n for n in nodes if n not in on]
                continue
            done += self._start_units(sess, label, failed, compute=bool(on))
        if any(d.startswith("started slurmctld") for d in done[waited:]) or not self.cluster.client.ping(timeout=15):
            self._controller_answers(deadline, progress)
        if failed or unreachable:
            raise SimclusterError(f"heal of cluster '{self.name}' incomplete: "
                                  + "; ".join(([f"could not start {', '.join(failed)}"] if failed else [])
                                              + ([f"no SSH to {', '.join(unreachable)}"] if unreachable else []))
                                  + (f" (done: {'; '.join(done)})" if done else ""),
                                  "see the unit's journal on that host (journalctl -u UNIT), then heal again")
        t0 = time.monotonic()
        client = self.cluster.client
        resumed: List[str] = []

        # Answers slurmctld, and is not left DOWN or drained by a fault (an administrator's
        # drain stays: such a node only has to answer).
        def answers(s: NodeState) -> bool:
            return s.responding and not down_after_fault(s) and "completing" not in s.state.lower()
        states = client.node_states(timeout=20) or {}
        # The drains `fault drain` made (marked), as heal undoes a local cluster's.
        for n in nodes:
            s = states.get(n)
            if s is not None and "drain" in s.state.lower() and s.reason.endswith(DRAIN_MARK):
                if self.admin.run(["scontrol", "update", f"nodename={n}", "state=resume"], timeout=20).ok:
                    resumed.append(f"undrained {n}")
        if done or resumed or any(n not in states or not answers(states[n]) for n in nodes):
            self._node_answers(nodes, deadline, progress, t0, resumed, answers)
        if not done and not resumed:
            return f"cluster '{self.name}': nothing to heal (every unit runs, no node left down by a fault)"
        return f"cluster '{self.name}' healed: " + "; ".join(done + resumed)

    def _start_units(self, sess: SSHSession, label: str, failed: List[str], compute: bool) -> List[str]:
        spec = self.cluster.spec
        units = host_units(sess is self.session, compute, bool(spec.accounting), bool(spec.rest))
        started, bad = parse_started(self._run(sess, heal_script(units), "heal", timeout=180).stdout)
        failed += [f"{u} on {label}" for u in bad]
        return [f"started {u} on {label}" for u in started]

    def _rediscover(self) -> None:
        """The cluster as the controller answers now (its nodes, their addresses)."""
        state = self.cluster.provider.discover(self.name)
        if state is not None:
            self.cluster = Cluster(state, self.cluster.provider)

    # -- job faults: Slurm commands, as on every cluster (as root: moving another's job) ------------
    def time_limit(self, job_id: str, seconds: int) -> str:
        self._check_running()
        return jobfaults.time_limit(self.admin, job_id, int(seconds), self.name).message

    def preempt(self, job_id: str, mode: Optional[str] = None, progress: Progress = lambda line: None) -> str:
        self._check_running()
        return jobfaults.preempt(self.admin, job_id, self.name, mode, progress)


def run_fault(cluster: Cluster, verb: str, *args, **kwargs) -> str:
    """`simcluster fault VERB ... --ssh`: fault ``verb`` on the deployed ``cluster``."""
    faults = SSHFaults(cluster)
    try:
        return faults.inject(verb, *args, **kwargs)
    finally:
        faults.close()

