"""The cluster's side of `check --like/--config` and the Judge that collects the findings:
node types and partitions as text, EnforcePartLimits and AccountingStorageEnforce as
slurmctld applies them, a QoS's flags, and a header line rewritten to a new value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set

from provisioner.check.asks import Ask, SOURCE, conf_value, mem_text
from provisioner.check.options import SHORT_OPTIONS
from provisioner.check.rules.core import Edit, Finding, fix_text
from provisioner.check.script import HeaderOpt, Script
from provisioner.config.types import ClusterSpec, NodeSpec


def node_type(n: NodeSpec) -> str:
    """One node's shape as a header would ask for it: '64 CPUs, 250G, gpu:h100:8, features ib,h100'."""
    parts = [f"{n.cpus} CPUs", mem_text(n.memory)]
    if n.gpus:
        parts.append(node_gres_text(n))
    if n.features:
        parts.append("features " + ",".join(n.features))
    return ", ".join(parts)


def node_gres_text(n: NodeSpec) -> str:
    """A node's Gres= as slurm.conf says it: 'gpu:h100:8', MIG nodes' 'gpu:1g.10gb:4,gpu:3g.40gb:2',
    with ',shard:N' or ',mps:N' where the node has them."""
    if n.mig:
        text = ",".join(f"gpu:{p}:{c * len(n.gpus)}" for p, c in sorted(n.mig))
    else:
        text = f"gpu:{n.gpu_type}:{len(n.gpus)}" if n.gpu_type else f"gpu:{len(n.gpus)}"
    for name, per_gpu in (("shard", n.shards), ("mps", n.mps)):
        if per_gpu:
            text += f",{name}:{per_gpu * len(n.gpus)}"
    return text


def node_types(nodes: Sequence[NodeSpec]) -> str:
    """'2 x (64 CPUs, 250G, gpu:h100:8); 1 x (32 CPUs, 125G)': the node types of a partition."""
    counts: Dict[str, int] = {}
    for n in nodes:
        t = node_type(n)
        counts[t] = counts.get(t, 0) + 1
    return "; ".join(f"{c} x ({t})" for t, c in counts.items())


def partitions_text(spec: ClusterSpec) -> str:
    return ", ".join(p.name + (" (default)" if p.default else "") for p in spec.partitions)


def _enforce_part_limits(spec: ClusterSpec) -> str:
    """EnforcePartLimits as slurmctld reads it: NO (Slurm's default), ANY or ALL."""
    v = (conf_value(spec, "EnforcePartLimits") or "NO").upper()
    return {"YES": "ANY", "1": "ANY", "0": "NO"}.get(v, v)


def enforce_accounting(spec: ClusterSpec) -> Set[str]:
    """AccountingStorageEnforce's parts, with what each implies (qos/limits/safe: associations)."""
    if not spec.accounting:
        return set()
    parts = {x.strip().lower() for x in (conf_value(spec, "AccountingStorageEnforce") or "").split(",") if x.strip()}
    if "all" in parts:
        parts |= {"associations", "limits", "qos", "safe", "wckeys"}
    if parts & {"qos", "limits", "safe"}:
        parts.add("associations")
    return parts


@dataclass
class Judge:
    """One header against one cluster: the findings for each partition the job names."""
    script: Script
    spec: ClusterSpec
    ask: Ask
    findings: List[Finding] = field(default_factory=list)

    @property
    def enforce(self) -> str:
        return _enforce_part_limits(self.spec)

    def add(self, opt: Optional[HeaderOpt], severity: str, rule: str, message: str, offer: str,
            value: Optional[str] = None, insert: Optional[str] = None) -> None:
        """A finding at ``opt``'s line (the header's first line without one). ``value`` replaces
        the option's value there; ``insert`` is an #SBATCH line to add after the header."""
        path = self.script.path
        line = opt.line if opt is not None else self._first_header_line()
        edits: List[Edit] = []
        if opt is not None and value is not None:
            new = set_option(self.script.line_text(line), opt, value)
            if new is not None:
                edits = [Edit(path, line, line, new)]
        if insert is not None:
            last = max((o.line for o in self.script.header), default=1)
            edits = [Edit(path, last + 1, last, insert)]
        if not edits:
            fix = "# " + offer
        else:  # an insertion's text already ends with a comment saying where it goes
            fix = fix_text(edits, line, path) + ("; " if insert is not None else "   # ") + offer
        self.findings.append(Finding(path, line, severity, rule, message, fix, source=SOURCE, edits=edits))

    def _first_header_line(self) -> int:
        return min((o.line for o in self.script.header), default=1)

    def held_or_refused(self, refused: str, reason: str) -> str:
        """What Slurm does with a request over a partition limit, by EnforcePartLimits."""
        if self.enforce == "NO":
            if reason.startswith("Partition"):
                # the submission's own test says PartitionConfig; the scheduler's next pass says which limit
                reason = f"PartitionConfig, then {reason}"
            return f"sbatch accepts the job and it stays pending forever (Reason={reason}; EnforcePartLimits=NO)"
        return f'sbatch refuses the job: "{refused}" (EnforcePartLimits={self.enforce})'


def set_option(line: str, opt: HeaderOpt, value: str) -> Optional[str]:
    """``line`` (an #SBATCH line) with ``opt``'s value replaced by ``value`` (inside the quotes
    it had, if any); None when the option cannot be found there as written."""
    long = "[-_]".join(re.escape(w) for w in opt.key.split("-"))
    shorts = [s for s, k in SHORT_OPTIONS.items() if k == opt.key]
    v = re.escape(opt.value)
    patterns = [rf"(--{long}(?:=|\s+))([\"']?)({v})\2(?=\s|#|$)"]
    patterns += [rf"((?<![\w-])-{s}(?:=|\s*))([\"']?)({v})\2(?=\s|#|$)" for s in shorts]
    for pat in patterns:
        m = re.search(pat, line)
        if m:
            return line[:m.start(3)] + value + line[m.end(3):]
    return None


def qos_flags(spec: ClusterSpec, name: Optional[str]) -> Set[str]:
    if not name:
        return set()
    for q in spec.qos:
        if q.name.lower() == name.lower():
            return {f.lower() for f in q.flags}
    return set()
