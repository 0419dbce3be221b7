"""Start munged, slurmctld and one slurmd per node, each watched until it is usable."""

from __future__ import annotations

import socket
from typing import Tuple

from provisioner.actions.context import UpContext
from provisioner.actions.preflight import find_binary
from provisioner.errors import StartupError
from provisioner.procs import spawn, tail
from provisioner.wait import WaitTimeout, poll_until


def _died(ctx: UpContext, key: str, log_name: str) -> StartupError:
    proc = ctx.daemons[key]
    log = ctx.layout.daemon_log(log_name)
    out = ctx.layout.log / f"{log_name}.out"
    details = [f"--- tail of {path} ---\n{tail(path)}" for path in (log, out) if path.exists()]
    return StartupError(f"{key} exited during startup (exit code {proc.returncode})", f"see {log}",
                        details="\n".join(details))


def start_munged(ctx: UpContext, timeout: float = 10.0) -> None:
    layout = ctx.layout
    # --force: the state dir is 0700 (and ~ may be too); munged would refuse a socket
    # that other users cannot reach, but only this user needs it.
    argv = [find_binary("munged"), "--foreground", "--force", f"--key-file={layout.munge_key}",
            f"--socket={layout.munge_socket}", f"--pid-file={layout.run / 'munged.pid'}",
            f"--seed-file={layout.munge_dir / 'seed'}"]
    # In the foreground munged logs to stderr only, so that is its log file.
    ctx.record("munged", spawn(argv, layout.daemon_log("munged"), ctx.daemon_env()))

    def ready() -> Tuple[bool, str]:
        if ctx.daemons["munged"].poll() is not None:
            raise _died(ctx, "munged", "munged")
        return layout.munge_socket.exists(), "socket not created yet"

    try:
        poll_until(ready, timeout)
    except WaitTimeout as exc:
        raise StartupError(f"munged did not create its socket within {exc.waited:.0f}s",
                           details=tail(layout.daemon_log("munged"))) from None


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_slurmctld(ctx: UpContext, timeout: float = 20.0) -> None:
    layout = ctx.layout
    argv = [find_binary("slurmctld"), "-D", "-f", str(layout.slurm_conf)]
    ctx.record("slurmctld", spawn(argv, layout.log / "slurmctld.out", ctx.daemon_env()))

    def ready() -> Tuple[bool, str]:
        if ctx.daemons["slurmctld"].poll() is not None:
            raise _died(ctx, "slurmctld", "slurmctld")
        return _port_open(ctx.state.controller_port), "port not open"

    try:
        poll_until(ready, timeout)
    except WaitTimeout as exc:
        raise StartupError(f"slurmctld did not open port {ctx.state.controller_port} within "
                           f"{exc.waited:.0f}s", details=tail(layout.daemon_log("slurmctld"))) from None


def start_slurmds(ctx: UpContext) -> None:
    """One `slurmd -N <node>` per virtual node, all started at once; readiness is checked later."""
    layout = ctx.layout
    binary = find_binary("slurmd")
    env = ctx.slurmd_env()
    for node in ctx.spec.nodes:
        argv = [binary, "-D", "-N", node.name, "-f", str(layout.slurm_conf)]
        ctx.record(f"slurmd:{node.name}", spawn(argv, layout.log / f"slurmd-{node.name}.out", env))


def check_daemons_alive(ctx: UpContext) -> None:
    """Raise StartupError naming the first daemon that has exited."""
    for key, proc in ctx.daemons.items():
        if proc.poll() is not None:
            log_name = key.replace(":", "-")
            raise _died(ctx, key, log_name)
