"""gres.conf: the GPU type and device numbers each node's GPUs have.

``NodeName=gpu[001-004] Name=gpu Type=h100 File=/dev/nvidia[0-7]`` says the type and the
device numbers (the physical ids a mirror can reuse); ``Count=`` a count without devices;
``AutoDetect=nvml`` (or nvidia, rsmi) leaves counts and types to the hardware, so the
slurm.conf's ``Gres=`` says them (the mirror writes explicit lines). A line without NodeName
applies to every node. MIG lines (``Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/
nvidia-cap21,...`` or ``File=/dev/nvidia-caps/...``) say which GPUs the instances are cut
from; shard and mps lines are read from slurm.conf's Gres= (their counts); other gres (nic
...) are reported dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from provisioner.config import hostlist
from provisioner.config.mig import profile_of
from provisioner.like.reader import ConfFile, LikeError, Where


@dataclass
class GresEntry:
    """One gres.conf line's GPUs for one node."""

    where: Where
    gpu_type: Optional[str]
    ids: Optional[List[int]]  # device numbers from File= (None: no File=)
    count: Optional[int]      # Count= or the number of files
    mig_parents: Optional[List[int]] = None  # a MIG line's parent GPUs (/dev/nvidiaN of MultipleFiles)


@dataclass
class GresConf:
    """Per node, its gres.conf GPU lines; and what was left out, for the report."""

    entries: Dict[str, List[GresEntry]] = field(default_factory=dict)
    autodetect: Optional[str] = None
    dropped: List[tuple] = field(default_factory=list)  # (where, key, value, reason)

    def for_node(self, name: str) -> List[GresEntry]:
        return self.entries.get(name, [])


def _device_ids(value: str, where: Where) -> List[int]:
    try:
        paths = hostlist.expand(value)
    except hostlist.HostlistError as exc:
        raise LikeError(f"{where}: File={value}: {exc}") from None
    ids = []
    for p in paths:
        m = re.search(r"(\d+)$", p)
        if not m:
            raise LikeError(f"{where}: File={value}: '{p}' is not a numbered device like /dev/nvidia0")
        ids.append(int(m.group(1)))
    return ids


def _mig_parents(keys: Dict[str, str], where: Where) -> List[int]:
    """The parent GPUs (/dev/nvidiaN) among a MIG line's files; [] where it names only
    nvidia-caps devices."""
    files = keys.get("multiplefiles") or keys.get("file") or ""
    try:
        paths = [p for part in files.split(",") if part for p in hostlist.expand(part)]
    except hostlist.HostlistError as exc:
        raise LikeError(f"{where}: {files}: {exc}") from None
    return sorted({int(m.group(1)) for p in paths for m in [re.search(r"/nvidia(\d+)$", p)] if m})


def parse_gres(conf: ConfFile, node_names: Sequence[str]) -> GresConf:
    """The GPUs gres.conf gives each of ``node_names``."""
    out = GresConf()
    known = set(node_names)
    for line in conf.lines:
        keys = {k.lower(): v for k, v in line.pairs}
        targets: List[str] = list(node_names)
        if "nodename" in keys:
            try:
                targets = [n for n in hostlist.expand(keys["nodename"]) if n in known]
            except hostlist.HostlistError as exc:
                raise LikeError(f"{line.where}: {exc}") from None
        if "autodetect" in keys:
            if keys["autodetect"].lower() != "off":
                out.autodetect = keys["autodetect"]
            if len(keys) == 1 or set(keys) == {"nodename", "autodetect"}:
                continue
        name = keys.get("name")
        if name is None:
            raise LikeError(f"{line.where}: a gres.conf line without Name=", "write Name=gpu")
        if name.lower() in ("shard", "mps"):
            continue  # their counts are slurm.conf's Gres= (production.settle_sharing)
        if name.lower() != "gpu":
            out.dropped.append((line.where, "gres.conf Name", name, "a mirror has GPUs, shards and MPS only: "
                                                                    "other gres are left out"))
            continue
        if profile_of(keys.get("type", "")):
            entry = GresEntry(line.where, keys["type"], None, None, mig_parents=_mig_parents(keys, line.where))
            for n in targets:
                out.entries.setdefault(n, []).append(entry)
            continue
        for key in keys:
            if key in ("cores", "links", "flags", "multiplefiles"):
                out.dropped.append((line.where, f"gres.conf {key.capitalize()}", keys[key],
                                    "device affinity and flags are the real hardware's"))
        ids = _device_ids(keys["file"], line.where) if "file" in keys else None
        count = None
        if "count" in keys:
            if not keys["count"].isdecimal():
                raise LikeError(f"{line.where}: Count={keys['count']} is not a whole number")
            count = int(keys["count"])
        elif ids is not None:
            count = len(ids)
        entry = GresEntry(line.where, keys.get("type"), ids, count)
        for n in targets:
            out.entries.setdefault(n, []).append(entry)
    return out


def sharing_item(raw: str) -> Optional[List[str]]:
    """A Gres= item's fields if it is GPU sharing (shard:N, mps:N, a MIG-typed gpu:3g.40gb:N),
    else None."""
    item = re.sub(r"\(.*\)$", "", raw.strip())
    parts = [p for p in item.split(":") if p.lower() != "no_consume"]
    name = parts[0].lower()
    if name in ("shard", "mps") or (name == "gpu" and len(parts) >= 2 and not parts[1].isdecimal()
                                    and profile_of(parts[1])):
        return parts
    return None
