"""`verify --suite faults`: faults.gpu-faults, a GPU fault caught by the cluster's health check.

On a node with fake GPUs, `fault gpu NODE --xid 79` (the GPU falls off the bus): the
health check (healthCheck: in the spec; docs/faults.md) must drain the node with a reason
that names the GPU and the Xid within a few of its intervals; `fault heal NODE` must clear
the fault and the node must be idle again. The check reports both times (fault -> drain,
heal -> idle). It SKIPs on a cluster without fake GPUs or without a health check.
"""

from __future__ import annotations

import time
from typing import Tuple

from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.verify.context import VerifyContext
from provisioner.verify.outcome import CheckFailed, CheckSkipped, Outcome

XID = 79


def _node_state(ctx: VerifyContext, node: str) -> Tuple[str, str]:
    """(sinfo's state, its reason) of ``node``."""
    res = ctx.client.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], timeout=20)
    line = (res.stdout.strip().splitlines() or [""])[0] if res.ok else ""
    state, _, reason = line.partition("|")
    return state.strip(), reason.strip()


def _when(ctx: VerifyContext, node: str, cond) -> Tuple[bool, Tuple[str, str]]:
    state = _node_state(ctx, node)
    return cond(state), state


def check_gpu_faults(ctx: VerifyContext) -> Outcome:
    inj = ctx.target.faults
    if inj is None or not hasattr(inj, "gpu"):  # a deployed cluster's (--ssh) has no fake-GPU faults
        raise CheckSkipped("fault gpu needs a local or docker cluster")
    node = next((n.name for n in ctx.spec.nodes if n.gpus), None) if ctx.spec.fake_gpus else None
    if node is None:
        raise CheckSkipped("the cluster has no fake GPUs (up --fake-gpus N)")
    hc = ctx.spec.health_check
    if hc is None:
        raise CheckSkipped("the cluster runs no health check (healthCheck: in the spec; docs/faults.md)")
    # Idle first (a job of an earlier check may still be completing there).
    try:
        state, reason = poll_until(lambda: _when(ctx, node, lambda s: s[0] == "idle"), ctx.limit(30),
                                   first_delay=0.25, max_delay=0.5)
    except WaitTimeout as exc:
        state, reason = exc.last_seen if isinstance(exc.last_seen, tuple) else ("", "")
    if state != "idle":
        raise CheckSkipped(f"{node} is {state or 'unknown'} ({reason or 'no reason'}), not idle: "
                           "the check needs an idle fake-GPU node")
    # Three intervals: slurmctld starts a round at most one interval after the fault, and
    # the round itself takes a moment on a busy machine.
    limit = ctx.limit(3 * hc.interval + 30)
    t0 = time.monotonic()
    inj.gpu(node, gpu=0, xid=XID)
    try:
        try:
            seen = poll_until(lambda: _when(ctx, node, lambda s: "drain" in s[0]), limit, first_delay=0.25,
                              max_delay=0.25)
        except WaitTimeout:
            raise CheckFailed(f"{node} not drained {limit:.0f} s after `fault gpu {node} --xid {XID}` "
                              f"(HealthCheckInterval={hc.interval}); it is {'|'.join(_node_state(ctx, node))}") \
                from None
        to_drain = time.monotonic() - t0
        if f"Xid {XID}" not in seen[1] or not seen[1].startswith("gpu0"):
            raise CheckFailed(f"{node} drained with reason {seen[1]!r}, which does not name gpu0 and Xid {XID}")
    finally:
        t1 = time.monotonic()
        try:
            healed = inj.heal(timeout=ctx.limit(120), node=node)
        except Exception as exc:  # a failed heal is the check's failure, with its reason
            raise CheckFailed(f"fault heal {node} failed: {getattr(exc, 'message', exc)}") from None
    try:
        poll_until(lambda: _when(ctx, node, lambda s: s[0] == "idle"), ctx.limit(60), first_delay=0.25,
                   max_delay=0.25)
    except WaitTimeout:
        raise CheckFailed(f"{node} not idle after `fault heal {node}`: {'|'.join(_node_state(ctx, node))}; "
                          f"heal said: {healed}") from None
    to_idle = time.monotonic() - t1
    return Outcome(f"fault gpu {node} --xid {XID}: drained in {to_drain:.1f} s (HealthCheckInterval={hc.interval}) "
                   f"with reason \"{seen[1]}\"; fault heal {node}: idle in {to_idle:.1f} s",
                   {"node": node, "reason": seen[1], "fault_to_drain_s": round(to_drain, 2),
                    "heal_to_idle_s": round(to_idle, 2), "interval_s": hc.interval})
