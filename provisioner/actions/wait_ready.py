"""The readiness gate: return as soon as every node is idle; on timeout, say why."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from provisioner.actions.context import UpContext
from provisioner.actions.daemons import check_daemons_alive
from provisioner.errors import StartupError
from provisioner.procs import tail
from provisioner.slurm import NodeState, format_node_table, node_states
from provisioner.wait import WaitTimeout, poll_until


def wait_nodes_ready(ctx: UpContext, timeout: float) -> Dict[str, NodeState]:
    names = [n.name for n in ctx.spec.nodes]
    conf = ctx.layout.slurm_conf

    def check() -> Tuple[bool, Optional[Dict[str, NodeState]]]:
        check_daemons_alive(ctx)
        states = node_states(conf)
        if states is None:
            return False, None
        return all(states.get(n) is not None and states[n].ready for n in names), states

    # Bigger clusters: each sinfo costs more, so poll a little less often.
    max_delay = 0.05 if len(names) <= 16 else 0.25
    try:
        return poll_until(check, timeout, first_delay=0.01, max_delay=max_delay)
    except WaitTimeout as exc:
        states = exc.last_seen or {}
        not_ready = [n for n in names if n not in states or not states[n].ready]
        details = [f"nodes not ready ({len(not_ready)} of {len(names)}):",
                   format_node_table(states, not_ready[:20])]
        details.append(f"--- tail of {ctx.layout.daemon_log('slurmctld')} ---")
        details.append(tail(ctx.layout.daemon_log("slurmctld"), 15))
        for n in not_ready[:2]:
            log = ctx.layout.daemon_log(f"slurmd-{n}")
            details.append(f"--- tail of {log} ---")
            details.append(tail(log, 15))
        raise StartupError(
            f"cluster '{ctx.spec.name}' not ready after {exc.waited:.0f}s: "
            f"{len(not_ready)} of {len(names)} nodes are not idle",
            "raise --wait, or look at the logs below",
            details="\n".join(details),
        ) from None
