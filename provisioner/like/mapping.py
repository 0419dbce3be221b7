"""A production slurm.conf (+ gres.conf) -> the raw cluster spec a YAML file would say.

The result is validated by provisioner.config.validate like any spec: node names and
shapes, typed GPUs, features and node options; partitions with their options; the
cluster-wide settings jobs can see as ``slurmConf`` lines; accounts and QoS that
partitions name. Everything else is reported, with a reason (provisioner/like/keys.py).
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from provisioner.config import hostlist
from provisioner.config.problems import TOKEN_RE
from provisioner.config.validate import NODE_OPTIONS, NODE_RE, PARTITION_RE
from provisioner.like import keys
from provisioner.like.gres import sharing_item
from provisioner.like.production import Node, Parsed, Partition
from provisioner.like.reader import (ConfFile, ConfLine, LikeError, Where, int_value, line_name, one_value,
                                     time_value)
from provisioner.like.report import Report


NODE_NAME_RULE = ("simcluster node names are lowercase letters, digits and '-', starting with a letter, "
                  "at most 40: they become host names, directory names and gres device names here")


class _Mapper:
    def __init__(self, conf: ConfFile, report: Report, source: str):
        self.conf, self.report, self.source = conf, report, source
        self.parsed = Parsed()
        self.node_defaults: Dict[str, str] = {}
        self.part_defaults: Dict[str, str] = {}
        self.nodesets: Dict[str, Tuple[Where, Dict[str, str]]] = {}
        self.accounting_lines: List[Tuple[Where, str, str]] = []
        self.health_lines: List[Tuple[Where, str, str]] = []
        self.future: Dict[str, Where] = {}
        self.default_state: Optional[str] = None
        self.node_default_cpus: Optional[str] = None  # a NodeName=DEFAULT's CPUs= (not Procs=)

    # ------------------------------------------------------------------ lines
    def run(self) -> Parsed:
        for line in self.conf.lines:
            kind = line.kind
            if kind == "nodename":
                self._node_line(line)
            elif kind == "partitionname":
                self._partition_line(line)
            elif kind == "nodeset":
                self._nodeset_line(line)
            elif kind == "downnodes":
                self.report.drop(line.where, "DownNodes", line.head, "node states are the cluster's: every node "
                                                                     "starts idle")
            elif kind in ("frontendname", "frontendaddr"):
                self.report.drop(line.where, "FrontendName", line.head, "front-end mode is not used here")
            else:
                for key, value in line.pairs:
                    self._global(line.where, key, value)
        if not self.parsed.nodes:
            raise LikeError(f"{self.source}: no NodeName line: there are no nodes to mirror",
                            "give --like the slurm.conf that defines the nodes (or includes them)")
        self._resolve_partitions()
        for where, key, value in self.accounting_lines:
            self._accounting_setting(where, key, value)
        self._health_check()
        return self.parsed

    def _health_check(self) -> None:
        """HealthCheckProgram/Interval/NodeState -> healthCheck: the production program where it is
        on this machine (slurmd runs it as in production), else the cluster's own GPU check
        at the production interval and node states; none where production runs none
        (no program, or HealthCheckInterval=0, Slurm's default)."""
        lines = {key: (where, value) for where, key, value in self.health_lines}
        if not lines:
            return
        program = lines.get("HealthCheckProgram", (None, ""))[1]
        interval = lines.get("HealthCheckInterval", (None, "0"))[1]
        state = lines.get("HealthCheckNodeState", (None, "ANY"))[1]
        first = next(iter(lines.values()))[0]
        if not program or not interval.isdigit() or int(interval) == 0:
            for key, (where, value) in lines.items():
                self.report.drop(where, key, value, "production runs no health check (no HealthCheckProgram, "
                                                    "or HealthCheckInterval=0)")
            return
        check: Dict[str, Any] = {"interval": int(interval), "nodeState": state.upper()}
        for key, (where, value) in lines.items():
            self.report.keep(where, key, value, "healthCheck: in the spec")
        if os.access(program, os.X_OK) and os.path.isfile(program):
            check["program"] = program
        else:
            self.report.note(f"{first}: HealthCheckProgram {program} is not on this machine: the mirror runs the "
                             f"cluster's own GPU health check instead, every {interval} s on {state.upper()} nodes "
                             "(docs/faults.md)")
        self.parsed.health_check = check

    def _options(self, line: ConfLine, keep: Sequence[str], aliases: Dict[str, str], drop: Dict[str, str],
                 what: str) -> Dict[str, str]:
        """The line's options after its first pair, in Slurm's spelling; dropped ones reported."""
        out: Dict[str, str] = {}
        for key, value in line.pairs[1:]:
            canon = keys.canonical(key, keep) or aliases.get(key.lower())
            if canon:
                out[canon] = value
                continue
            dropped = keys.canonical(key, drop)
            self.report.drop(line.where, dropped or key, value,
                             drop[dropped] if dropped else f"unknown {what} option, kept out")
        return out

    # ------------------------------------------------------------------ nodes
    def _node_line(self, line: ConfLine) -> None:
        head = line_name(line, "NodeName", "node", "write NodeName=node[1-4] ...")
        values = self._node_options(line)
        state = next((v for k, v in line.pairs[1:] if k.lower() == "state"), None)
        if head.upper() == "DEFAULT":
            for k, v in values.items():
                self.report.keep(line.where, k, v, "default of the NodeName lines after it")
            line_cpus = [v for k, v in line.pairs[1:] if k.lower() == "cpus"]
            if line_cpus:
                self.node_default_cpus = line_cpus[-1]
            self.node_defaults.update(values)
            self.default_state = state or self.default_state
            return
        try:
            names = hostlist.expand(head)
        except hostlist.HostlistError as exc:
            raise LikeError(f"{line.where}: NodeName={head}: {exc}") from None
        bad = [n for n in names if not NODE_RE.match(n)]
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise LikeError(f"{line.where}: node name '{bad[0]}'{more} cannot be used here: {NODE_NAME_RULE}",
                            "rename the nodes in a copy of the conf (and in its partitions and gres.conf)")
        merged = self._merged_node_values(values, line)
        if (state or self.default_state or "").upper().startswith("FUTURE"):
            # Defined for later: no job runs there in production either.
            for name in names:
                self.future[name] = line.where
            self.report.note(f"{line.where}: {hostlist.compress(names)} left out: State=FUTURE nodes run no job")
            return
        proto = self._node_shape(line.where, merged, len(names))
        ports = self._ports(line.where, merged.get("Port"), names)
        for i, name in enumerate(names):
            if name in self.parsed.nodes:
                raise LikeError(f"{line.where}: node '{name}' is defined again (first at "
                                f"{self.parsed.nodes[name].where})", "define each node once")
            node = Node(name=name, where=line.where, cpus=proto.cpus, memory=proto.memory, gpus=proto.gpus,
                        gpu_type=proto.gpu_type, features=proto.features, options=dict(proto.options),
                        port=ports[i] if ports else None, mig_total=dict(proto.mig_total),
                        shard_total=proto.shard_total, mps_total=proto.mps_total)
            self.parsed.nodes[name] = node
        for k, v in values.items():
            if k != "Port":  # reported by _ports, kept or not
                self.report.keep(line.where, k, v)
        self.report.keep(line.where, "NodeName", head, f"{len(names)} node{'s' if len(names) > 1 else ''}")

    def _node_options(self, line: ConfLine) -> Dict[str, str]:
        """The NodeName line's options; of Feature and Features (CPUs and Procs) on one line the
        first spelling wins, as in Slurm's _parse_nodename."""
        values = self._options(line, keys.NODE_KEEP, keys.NODE_ALIASES, keys.NODE_DROP, "NodeName")
        for canon, preferred in (("Features", "feature"), ("CPUs", "cpus")):
            given = [v for k, v in line.pairs[1:] if k.lower() == preferred]
            if given:
                values[canon] = given[-1]
        return values

    def _merged_node_values(self, values: Dict[str, str], line: ConfLine) -> Dict[str, str]:
        """The line's values over the NodeName=DEFAULT ones, with Slurm's order for CPUs:
        the line's CPUs, the default's CPUs, the line's Procs, the default's Procs."""
        merged = {**self.node_defaults, **values}
        line_cpus = any(k.lower() == "cpus" for k, _ in line.pairs[1:])
        if not line_cpus and self.node_default_cpus is not None:
            merged["CPUs"] = self.node_default_cpus
        return merged

    def _node_shape(self, where: Where, values: Dict[str, str], count: int) -> Node:
        node = Node(name="", where=where)
        topo = {k: int_value(where, k, values[k])
                for k in NODE_OPTIONS if k in values and k not in ("Weight", "TmpDisk")}
        # Slurm's _parse_nodename: with both Sockets and SocketsPerBoard, SocketsPerBoard counts.
        if "SocketsPerBoard" in topo:
            sockets = topo.get("Boards", 1) * topo["SocketsPerBoard"]
        else:
            sockets = topo.get("Sockets")
        cores, threads = topo.get("CoresPerSocket", 1), topo.get("ThreadsPerCore", 1)
        if "CPUs" in values:
            node.cpus = int_value(where, "CPUs", values["CPUs"])
            if sockets is not None and node.cpus not in (sockets, sockets * cores, sockets * cores * threads):
                # slurmctld resets CPUs that match no Sockets[*CoresPerSocket[*ThreadsPerCore]].
                self.report.note(f"{where}: CPUs={node.cpus} matches no Sockets*CoresPerSocket*ThreadsPerCore: "
                                 f"CPUs={sockets * cores * threads}, as slurmctld resets it")
                node.cpus = sockets * cores * threads
        elif topo:
            # Slurm's own rule: CPUs = sockets (Sockets, or Boards x SocketsPerBoard) x cores x threads.
            node.cpus = (sockets if sockets is not None else topo.get("Boards", 1)) * cores * threads
        if "RealMemory" in values:
            node.memory = int_value(where, "RealMemory", values["RealMemory"])
        for k in NODE_OPTIONS:
            if k in values:
                node.options[k] = one_value(values[k])
        if "Features" in values:
            feats = []
            for f in (x.strip() for x in values["Features"].split(",")):
                if not f:
                    continue
                if TOKEN_RE.match(f):
                    feats.append(f)
                else:
                    self.report.drop(where, "Features", f, "not a feature name simcluster takes: letters, digits, "
                                                           "'_', '.', '+', '-'")
            node.features = tuple(dict.fromkeys(feats))
        if "Gres" in values:
            self._gpu_sharing(node, values["Gres"])
            node.gpus, node.gpu_type = self._gres(where, values["Gres"])
        return node

    def _gpu_sharing(self, node, value: str) -> None:
        """Take a Gres= value's MIG-typed GPUs (gpu:3g.40gb:2) and shard/mps counts onto the
        node (production.settle_sharing makes them spec keys); _gres skips them."""
        for raw in re.split(r",(?![^(]*\))", value):
            parts = sharing_item(raw)
            if not parts:
                continue
            count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdecimal() else 1
            if parts[0].lower() in ("shard", "mps"):
                setattr(node, f"{parts[0].lower()}_total", getattr(node, f"{parts[0].lower()}_total") + count)
            else:
                node.mig_total[parts[1].lower()] = node.mig_total.get(parts[1].lower(), 0) + count

    def _gres(self, where: Where, value: str) -> Tuple[int, Optional[str]]:
        """(GPU count, type) of a Gres= value; non-GPU gres and a second GPU type are reported."""
        count, gpu_type = 0, None
        if value.strip().lower() in ("", "(null)", "none"):
            return 0, None
        for item in re.split(r",(?![^(]*\))", value):
            if sharing_item(item):
                continue  # MIG instances, shards, MPS: _gpu_sharing
            item = re.sub(r"\(.*\)$", "", item.strip())  # (S:0-1): socket affinity of real hardware
            parts = item.split(":")
            if parts[0].lower() != "gpu":
                self.report.drop(where, "Gres", item, "a mirror has GPUs only: other gres are left out")
                continue
            parts = [p for p in parts[1:] if p.lower() != "no_consume"]
            this_type, n = None, 1
            if len(parts) == 1 and parts[0].isdecimal():
                n = int(parts[0])
            elif len(parts) == 1:
                this_type = parts[0]
            elif len(parts) == 2 and parts[1].isdecimal():
                this_type, n = parts[0], int(parts[1])
            elif parts:
                raise LikeError(f"{where}: Gres={value}: '{item}' is not gpu[:type][:count]")
            if this_type is not None and not TOKEN_RE.match(this_type):
                raise LikeError(f"{where}: Gres={value}: '{this_type}' is not a GPU type simcluster takes")
            if count and this_type != gpu_type:
                self.report.drop(where, "Gres", item, f"one GPU type per node here: the node keeps "
                                                      f"gpu:{gpu_type or ''}{':' if gpu_type else ''}{count}")
                continue
            gpu_type = this_type
            count += n
        return count, gpu_type

    def _ports(self, where: Where, value: Optional[str], names: List[str]) -> Optional[List[int]]:
        if value is None:
            return None
        spec = value.strip()
        try:
            ports = [int(p) for p in hostlist.expand(spec if spec.startswith("[") else f"[{spec}]")]
        except hostlist.HostlistError:
            raise LikeError(f"{where}: Port={value} is not a port number or range") from None
        if len(ports) == len(names) and all(1024 <= p <= 65535 for p in ports):
            self.report.keep(where, "Port", value, "the slurmd port of each node")
            return ports
        if len(ports) == 1 and len(names) > 1:
            reason = f"one port for {len(names)} nodes, each on a host of its own there; here each gets a free one"
        else:
            reason = f"{len(ports)} ports for {len(names)} nodes; here each node gets a free one"
        self.report.drop(where, "Port", value, reason)
        return None

    def _nodeset_line(self, line: ConfLine) -> None:
        name = line.head.strip()
        values = {k.lower(): v for k, v in line.pairs[1:]}
        self.nodesets[name] = (line.where, values)
        self.report.keep(line.where, "NodeSet", name, "its nodes go into the partitions naming it")

    # ------------------------------------------------------------ partitions
    def _partition_line(self, line: ConfLine) -> None:
        head = line_name(line, "PartitionName", "partition", "write PartitionName=gpu Nodes=...")
        values = self._options(line, keys.PARTITION_KEEP, keys.PARTITION_ALIASES, keys.PARTITION_DROP,
                               "PartitionName")
        if head.upper() == "DEFAULT":
            for k, v in values.items():
                self.report.keep(line.where, k, v, "default of the PartitionName lines after it")
            self.part_defaults.update(values)
            return
        if not PARTITION_RE.match(head):
            raise LikeError(f"{line.where}: partition name '{head}' cannot be used here: simcluster partition names "
                            "are letters, digits, '_' and '-', starting with a letter, at most 30",
                            "rename it in a copy of the conf")
        if any(p.name == head for p in self.parsed.partitions):
            raise LikeError(f"{line.where}: partition '{head}' is defined again", "define each partition once")
        merged = {**self.part_defaults, **values}
        part = Partition(name=head, where=line.where, nodes_expr=merged.get("Nodes"))
        default = merged.get("Default", "NO").strip().upper()
        if default not in ("YES", "NO"):
            raise LikeError(f"{line.where}: Default={merged['Default']}: expected YES or NO")
        part.default = default == "YES"
        part.max_time = time_value(merged.get("MaxTime", "INFINITE"))
        for k, v in merged.items():
            if k in ("Nodes", "Default", "MaxTime"):
                continue
            v = one_value(v)
            if k == "State" and v.upper() == "UP":
                continue  # every partition is UP unless it says otherwise
            if any(c.isspace() for c in v) or not v:
                self.report.drop(line.where, k, v, "a value with spaces or none")
                continue
            if k in ("AllowAccounts", "AllowQos") and v.upper() == "ALL":
                continue  # Slurm's default: every account, every QoS
            part.options[k] = time_value(v) if k in ("DefaultTime", "GraceTime") else v
        for k, v in values.items():
            self.report.keep(line.where, k, v)
        self.report.keep(line.where, "PartitionName", head)
        self.parsed.partitions.append(part)

    def _resolve_partitions(self) -> None:
        node_names = list(self.parsed.nodes)
        parts: List[Partition] = []
        for part in self.parsed.partitions:
            expr = part.nodes_expr
            if expr is None or not expr.strip():
                self.report.drop(part.where, "PartitionName", part.name, "the partition has no nodes (Nodes=)")
                continue
            if expr.strip().upper() == "ALL":
                part.nodes, part.all_nodes = list(node_names), True
            else:
                part.nodes = self._members(part.where, part.name, expr)
            if not part.nodes:
                self.report.drop(part.where, "PartitionName", part.name, "its nodes are all State=FUTURE")
                continue
            parts.append(part)
        if not parts and self.parsed.partitions:
            raise LikeError(f"{self.source}: no partition has nodes", "give a partition Nodes=")
        if not parts:
            has_gpus = any(n.gpus for n in self.parsed.nodes.values())
            name = "gpu" if has_gpus else "main"
            parts = [Partition(name=name, where=Where(self.source, 0), nodes_expr="ALL", default=True,
                               nodes=list(node_names), all_nodes=True)]
            self.report.note(f"no PartitionName line: one partition '{name}' of every node, Default=YES, "
                             "MaxTime=INFINITE")
        defaults = [p for p in parts if p.default]
        if len(defaults) > 1:
            # Slurm takes the last Default=YES.
            for p in defaults[:-1]:
                p.default = False
            self.report.note(f"several partitions say Default=YES; the last one, '{defaults[-1].name}', is the "
                             "default (as in Slurm)")
        elif not defaults:
            self.report.note(f"no partition says Default=YES; here '{parts[0].name}' is the default (simcluster "
                             "needs one): a job without -p runs there instead of being refused")
        self.parsed.partitions = parts
        in_parts = {n for p in parts for n in p.nodes}
        alone = [n for n in node_names if n not in in_parts]
        if alone:
            self.report.note(f"nodes in no partition (no job can run there, as in production): "
                             f"{hostlist.compress(alone)}")
        for p in parts:
            for key in ("AllowAccounts", "DenyAccounts"):
                for name in (p.options.get(key) or "").split(","):
                    if name and name.upper() != "ALL" and name.lower() not in self.parsed.accounts + ["root"]:
                        self.parsed.accounts.append(name.lower())
            for key in ("AllowQos", "DenyQos", "QOS"):
                for name in (p.options.get(key) or "").split(","):
                    if name and name.upper() != "ALL" and name.lower() not in self.parsed.qos + ["normal"]:
                        self.parsed.qos.append(name.lower())
        if self.parsed.accounts or self.parsed.qos:
            self.parsed.accounting = True

    def _members(self, where: Where, pname: str, expr: str) -> List[str]:
        try:
            names = hostlist.expand(expr)
        except hostlist.HostlistError as exc:
            raise LikeError(f"{where}: Nodes={expr}: {exc}") from None
        out: List[str] = []
        for n in names:
            if n in self.parsed.nodes:
                out.append(n)
            elif n in self.future:
                continue
            elif n in self.nodesets:
                out.extend(self._nodeset(n))
            elif n.upper() == "ALL":
                out.extend(self.parsed.nodes)
            else:
                raise LikeError(f"{where}: partition '{pname}' names node '{n}', which no NodeName line defines",
                                "define the node, or remove it from Nodes=")
        return list(dict.fromkeys(out))

    def _nodeset(self, name: str) -> List[str]:
        where, values = self.nodesets[name]
        if "nodes" in values:
            return self._members(where, f"NodeSet {name}", values["nodes"])
        if "feature" in values:
            return [n.name for n in self.parsed.nodes.values() if values["feature"] in n.features]
        raise LikeError(f"{where}: NodeSet={name} has neither Nodes= nor Feature=")

    # ---------------------------------------------------------------- globals
    def _global(self, where: Where, key: str, value: str) -> None:
        low = key.lower()
        if low == "accountingstoragetype":
            on = value.strip().endswith("slurmdbd")
            self.parsed.accounting = self.parsed.accounting or on
            self.report.keep(where, "AccountingStorageType", value, "accounting: true" if on else "no accounting")
            return
        if low == "grestypes":
            # shard and mps: the nodes' Gres= (mig/shards/mps keys); simcluster writes GresTypes.
            others = [t for t in one_value(value).split(",") if t and t.lower() not in ("gpu", "shard", "mps")]
            self.report.keep(where, "GresTypes", "gpu", "as simcluster's (shard, mps where nodes have them)")
            if others:
                self.report.drop(where, "GresTypes", ",".join(others), "a mirror has GPUs only: other gres are "
                                                                      "left out")
            return
        if keys.canonical(key, keys.GLOBAL_HEALTH):
            self.health_lines.append((where, keys.canonical(key, keys.GLOBAL_HEALTH), one_value(value)))
            return
        if keys.canonical(key, keys.GLOBAL_ACCOUNTING):
            self.accounting_lines.append((where, keys.canonical(key, keys.GLOBAL_ACCOUNTING), value))
            return
        reason = keys.global_reason(key)
        if reason:
            self.report.drop(where, keys.canonical(key, keys.GLOBAL_DROP) or key, value, reason)
            return
        canon = keys.canonical(key, keys.GLOBAL_KEEP)
        if canon is None:
            self.report.drop(where, key, value, "unknown key, kept out")
            return
        value = one_value(value)
        plugins = keys.PLUGINS.get(canon)
        if plugins and value.lower() not in plugins:
            self.report.drop(where, canon, value, f"not a plugin of this Slurm (it has {', '.join(plugins)})")
            return
        if canon in keys.VALUE_FILTERS:
            allowed, why = keys.VALUE_FILTERS[canon]
            items = [v for v in value.split(",") if v]
            gone = [v for v in items if v.lower() not in allowed]
            if gone:
                self.report.drop(where, canon, ",".join(gone), why)
            value = ",".join(v for v in items if v.lower() in allowed)
            if not value:
                return
        self._keep_line(where, canon, value)

    def _keep_line(self, where: Where, key: str, value: str) -> None:
        text = f'{key}="{value}"' if any(c.isspace() for c in value) else f"{key}={value}"
        self.parsed.slurm_conf.pop(key, None)  # the last one counts, as in Slurm
        self.parsed.slurm_conf[key] = text
        self.report.keep(where, key, value, "slurmConf")

    def _accounting_setting(self, where: Where, key: str, value: str) -> None:
        if not self.parsed.accounting:
            self.report.drop(where, key, value, keys.R_ACCOUNTING)
            return
        value = one_value(value)
        if key == "AccountingStorageTRES":
            items = [t for t in value.split(",") if t]
            gone = [t for t in items if t.lower().startswith("gres/") and not t.lower().startswith("gres/gpu")]
            if gone:
                self.report.drop(where, key, ",".join(gone), "a mirror has GPUs only: other gres are left out")
            value = ",".join(t for t in items if t not in gone)
        self._keep_line(where, key, value)


def parse_conf(conf: ConfFile, report: Report, source: str) -> Parsed:
    """Nodes, partitions and settings of ``conf``."""
    for note in conf.notes:
        report.note(note)
    return _Mapper(conf, report, source).run()
