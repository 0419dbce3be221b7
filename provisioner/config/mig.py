"""MIG layouts of fake GPUs: which profiles a GPU model has, and how a layout is placed.

A layout says, per GPU, how many GPU instances of each profile it is cut into:
``3g.40gb:2`` (two halves of an 80 GB card), ``3g.40gb:1,2g.20gb:1,1g.10gb:2``. Every GPU of
the node gets the same layout, as `nvidia-smi mig -cgi` run by a site's node setup gives it.

What fits is what NVIDIA's driver allows: a card has 7 compute slices and 8 memory slices
(A30: 4 and 4); a profile ``Ng.Mgb`` takes N compute slices and a fixed run of memory
slices that must start at one of the profile's placements (a 3g profile takes 4 memory
slices at 0 or 4, so a third 3g never fits). The profiles of each family, their ids (what
`nvidia-smi mig -lgip` lists) and placements are NVIDIA's MIG user guide's.

Pure logic, no simcluster imports: the spec's validation and the renderer use it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

# A layout as the spec keeps it: ((profile, GPU instances per GPU), ...), in the order given.
Layout = Tuple[Tuple[str, int], ...]


@dataclass(frozen=True)
class Profile:
    name: str  # "3g.40gb"
    slices: int  # compute slices (the "3g")
    profile_id: int  # the GPU instance profile id (nvidia-smi mig -lgip, -cgi ID)
    size: int  # memory slices it takes
    starts: Tuple[int, ...]  # memory slices it may start at


@dataclass(frozen=True)
class Instance:
    """One GPU instance of a placed layout."""

    profile: str
    profile_id: int
    gi: int  # GPU instance id
    start: int  # placement start (memory slice)
    size: int  # placement size (memory slices)


def _family(small: str, double: str, two: str, three: str, four: str, seven: str) -> Dict[str, Profile]:
    """The six profiles of a 7-slice card (A100, H100, H200, B200 ...): ids and placements
    are the same on all of them, only the memory in the names differs."""
    profiles = (Profile(small, 1, 19, 1, (0, 1, 2, 3, 4, 5, 6)), Profile(double, 1, 15, 2, (0, 2, 4, 6)),
                Profile(two, 2, 14, 2, (0, 2, 4)), Profile(three, 3, 9, 4, (0, 4)),
                Profile(four, 4, 5, 4, (0,)), Profile(seven, 7, 0, 8, (0,)))
    return {p.name: p for p in profiles}


# Profile family (provisioner/config/gpus.py: GpuModel.mig) -> its profiles by name.
FAMILIES: Dict[str, Dict[str, Profile]] = {
    "80gb": _family("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "40gb": _family("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "94gb": _family("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "96gb": _family("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "141gb": _family("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "180gb": _family("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    # A30: 4 compute and 4 memory slices.
    "24gb": {p.name: p for p in (Profile("1g.6gb", 1, 14, 1, (0, 1, 2, 3)), Profile("2g.12gb", 2, 5, 2, (0, 2)),
                                 Profile("4g.24gb", 4, 0, 4, (0,)))},
}
SLICES = {"24gb": 4}  # compute slices of a family's cards; 7 elsewhere
MEMORY_SLICES = {"24gb": 4}  # memory slices; 8 elsewhere
PROFILE_RE = re.compile(r"^\d+g\.\d+gb$")
MAX_PER_PROFILE = 7


def parse_layout(value) -> Layout:
    """'3g.40gb:2,1g.10gb:1' (or a mapping {profile: count}, or a list of such strings) ->
    ((profile, count), ...); a profile without a count is one instance. ValueError says what
    is wrong."""
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    else:
        parts = value if isinstance(value, list) else str(value).split(",")
        items = []
        for part in (str(x).strip() for x in parts):
            if not part:
                continue
            name, _, count = part.partition(":")
            items.append((name, count if count else 1))
    if not items:
        raise ValueError("an empty MIG layout (give profiles like '3g.40gb:2' or '1g.10gb:7')")
    out: Dict[str, int] = {}
    for name, count in items:
        name = name.strip().lower()
        if name.startswith("mig "):
            name = name[4:].strip()
        if not PROFILE_RE.match(name):
            raise ValueError(f"{name!r} is not a MIG profile like '3g.40gb' or '1g.10gb'")
        try:
            n = int(count) if not isinstance(count, bool) else -1
        except (TypeError, ValueError):
            n = -1
        if not 1 <= n <= MAX_PER_PROFILE:
            raise ValueError(f"{name}: {count!r} is not a count of GPU instances from 1 to {MAX_PER_PROFILE}")
        out[name] = out.get(name, 0) + n
    return tuple(out.items())


def layout_text(layout: Layout) -> str:
    """((3g.40gb, 2),) -> '3g.40gb:2', as the flag and the spec say it."""
    return ",".join(f"{p}:{n}" for p, n in layout)


def place(layout: Layout, family: str, gpu_name: str = "this GPU") -> List[Instance]:
    """The GPU instances of ``layout`` on one card of ``family``, biggest first at the first
    free placement, GPU instance ids counted from 1 in that order (a 7g instance is GI 0, as
    the driver numbers it). ValueError where a profile is not the card's or the layout does
    not fit."""
    profiles = FAMILIES.get(family)
    if not profiles:
        raise ValueError(f"{gpu_name} has no MIG (MIG needs an A100, A30, H100, H200, GH200 or B200 type or model)")
    for name, _ in layout:
        if name not in profiles:
            raise ValueError(f"{name} is not a MIG profile of {gpu_name} (its profiles: {', '.join(profiles)})")
    slices, memory = SLICES.get(family, 7), MEMORY_SLICES.get(family, 8)
    used = sum(profiles[name].slices * n for name, n in layout)
    if used > slices:
        raise ValueError(f"{layout_text(layout)} takes {used} compute slices; {gpu_name} has {slices}")
    wanted = sorted((profiles[name] for name, n in layout for _ in range(n)), key=lambda p: (-p.size, -p.slices))
    placed = _placements(wanted, [True] * memory)
    if placed is None:
        raise ValueError(f"{layout_text(layout)} does not fit {gpu_name}'s {memory} memory slices (each profile "
                         "starts only at its own placements: a 3g or 4g profile takes half of them)")
    out = []
    next_gi = 1
    for profile, start in placed:
        gi = 0 if profile.slices == slices else next_gi
        next_gi += 0 if gi == 0 else 1
        out.append(Instance(profile.name, profile.profile_id, gi, start, profile.size))
    return out


def _placements(wanted: List[Profile], free: List[bool]) -> Optional[List[Tuple[Profile, int]]]:
    """A start for each profile of ``wanted`` (biggest first) on the free memory slices, by
    trying every placement in turn (at most 7 instances: a handful of tries); None if none."""
    if not wanted:
        return []
    profile, rest = wanted[0], wanted[1:]
    for start in profile.starts:
        span = range(start, start + profile.size)
        if start + profile.size > len(free) or not all(free[s] for s in span):
            continue
        for s in span:
            free[s] = False
        tail = _placements(rest, free)
        for s in span:
            free[s] = True
        if tail is not None:
            return [(profile, start)] + tail
    return None


def family_profiles(family: str) -> Sequence[str]:
    return tuple(FAMILIES.get(family, {}))


def cap_minors(gpu_minor: int, gi: int) -> Tuple[int, int]:
    """The /dev/nvidia-caps/nvidia-capN minors of a GPU instance and of its first compute
    instance, by the driver's numbering (/proc/driver/nvidia-caps/mig-minors): 3 + 135 per
    GPU + 9 per GPU instance (its own, then 8 compute instances'). GPU 0's GI 2: 21 and 22."""
    base = 3 + gpu_minor * 135 + gi * 9
    return base, base + 1


def mig_uuid(cluster: str, node: str, index: int, gi: int) -> str:
    """MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx of GPU instance ``gi`` of a node's GPU
    ``index``, the same for the same cluster, node, GPU and instance (the form R470+ drivers
    print). fake-gpus.json carries it to nvidia-smi and the metrics; the TaskProlog to jobs."""
    h = hashlib.sha256(f"simcluster-mig/{cluster}/{node}/{index}/{gi}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def profile_of(name: str) -> Optional[Profile]:
    """The profile of that name in any family (for reading a production gres.conf)."""
    for profiles in FAMILIES.values():
        if name.lower() in profiles:
            return profiles[name.lower()]
    return None
