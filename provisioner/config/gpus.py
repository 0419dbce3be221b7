"""GPU models by Slurm GPU type: what a fake GPU of type "h100" looks like to nvidia-smi.

Sites name their GPU types freely (Gres=gpu:h100:8, gpu:a100_40gb:4, gpu:A100-SXM4-80GB:8),
so a type is looked up without case, '-', '_' or spaces, through a table of the spellings
seen in production slurm.conf files. What a model says (name, memory, power limit,
clocks, compute capability) is what the real card's nvidia-smi reports: the name exactly
(scripts grep it: `nvidia-smi | grep "NVIDIA H800"`), the memory in MiB as
`--query-gpu=memory.total` prints it (an "80GB" H100 has 81559 MiB).

A node's model: its gpuModel if the spec gives one (numbers of the known model of that
name, else read from the name's "NNGB", else GENERIC's), else the one known for its
gpuType, else GENERIC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from provisioner.config.mig import Instance
from provisioner.config.mig import place as place_mig


@dataclass(frozen=True)
class GpuModel:
    """What nvidia-smi reports for one GPU model."""

    name: str  # as nvidia-smi prints it ("NVIDIA H100 80GB HBM3")
    memory_mib: int  # memory.total
    power_limit_w: int  # power.limit
    idle_power_w: int  # power.draw of an idle card
    compute_cap: str  # compute_cap ("9.0")
    sm_clock_mhz: int  # clocks.max.sm
    mem_clock_mhz: int  # clocks.max.memory
    # Data-centre cards: no fan, ECC on, persistence mode on. Desk-side cards (GeForce,
    # RTX): a fan, no ECC, no MIG.
    datacenter: bool = True
    # The card's MIG profile family (provisioner/config/mig.py: FAMILIES), "" where the card
    # has no MIG (V100, L40S, T4, desk-side cards ...).
    mig: str = ""


def _m(name: str, memory_mib: int, power_w: int, idle_w: int, cc: str, sm: int, mem: int,
       datacenter: bool = True, mig: str = "") -> GpuModel:
    return GpuModel(name, memory_mib, power_w, idle_w, cc, sm, mem, datacenter, mig)


# Canonical type -> model. Memory sizes are what nvidia-smi shows on that card.
MODELS: Dict[str, GpuModel] = {
    "b200": _m("NVIDIA B200", 183359, 1000, 140, "10.0", 1965, 3996, mig="180gb"),
    "h200": _m("NVIDIA H200", 143771, 700, 75, "9.0", 1980, 3201, mig="141gb"),
    "h100": _m("NVIDIA H100 80GB HBM3", 81559, 700, 69, "9.0", 1980, 2619, mig="80gb"),
    "h100-pcie": _m("NVIDIA H100 PCIe", 81559, 350, 47, "9.0", 1755, 1593, mig="80gb"),
    "h100-nvl": _m("NVIDIA H100 NVL", 95830, 400, 60, "9.0", 1785, 2619, mig="94gb"),
    "h800": _m("NVIDIA H800", 81559, 700, 69, "9.0", 1980, 2619, mig="80gb"),
    "gh200": _m("NVIDIA GH200 480GB", 97871, 900, 90, "9.0", 1980, 2619, mig="96gb"),
    "a100": _m("NVIDIA A100-SXM4-80GB", 81920, 400, 60, "8.0", 1410, 1593, mig="80gb"),
    "a100-40gb": _m("NVIDIA A100-SXM4-40GB", 40960, 400, 55, "8.0", 1410, 1215, mig="40gb"),
    "a100-pcie": _m("NVIDIA A100 80GB PCIe", 81920, 300, 45, "8.0", 1410, 1512, mig="80gb"),
    "a100-pcie-40gb": _m("NVIDIA A100-PCIE-40GB", 40960, 250, 35, "8.0", 1410, 1215, mig="40gb"),
    "a800": _m("NVIDIA A800-SXM4-80GB", 81920, 400, 60, "8.0", 1410, 1593, mig="80gb"),
    "a40": _m("NVIDIA A40", 46068, 300, 30, "8.6", 1740, 7251),
    "a30": _m("NVIDIA A30", 24576, 165, 30, "8.0", 1440, 1215, mig="24gb"),
    "a10": _m("NVIDIA A10", 23028, 150, 16, "8.6", 1695, 6251),
    "a10g": _m("NVIDIA A10G", 23028, 300, 16, "8.6", 1710, 6251),
    "l40s": _m("NVIDIA L40S", 46068, 350, 35, "8.9", 2520, 9001),
    "l40": _m("NVIDIA L40", 46068, 300, 35, "8.9", 2490, 9001),
    "l4": _m("NVIDIA L4", 23034, 72, 16, "8.9", 2040, 6251),
    "v100": _m("Tesla V100-SXM2-32GB", 32768, 300, 43, "7.0", 1530, 877),
    "v100-16gb": _m("Tesla V100-SXM2-16GB", 16160, 300, 41, "7.0", 1530, 877),
    "v100-pcie": _m("Tesla V100-PCIE-32GB", 32768, 250, 36, "7.0", 1380, 877),
    "v100s": _m("Tesla V100S-PCIE-32GB", 32768, 250, 36, "7.0", 1597, 1107),
    "p100": _m("Tesla P100-PCIE-16GB", 16280, 250, 30, "6.0", 1328, 715),
    "t4": _m("Tesla T4", 15360, 70, 10, "7.5", 1590, 5001),
    "rtx-a6000": _m("NVIDIA RTX A6000", 49140, 300, 22, "8.6", 2100, 8001, datacenter=False),
    "rtx-6000-ada": _m("NVIDIA RTX 6000 Ada Generation", 49140, 300, 24, "8.9", 2505, 10001, datacenter=False),
    "rtx-4090": _m("NVIDIA GeForce RTX 4090", 24564, 450, 21, "8.9", 3105, 10501, datacenter=False),
    "rtx-3090": _m("NVIDIA GeForce RTX 3090", 24576, 350, 25, "8.6", 2100, 9751, datacenter=False),
    "rtx-2080ti": _m("NVIDIA GeForce RTX 2080 Ti", 11264, 250, 15, "7.5", 2100, 7000, datacenter=False),
}

# The name fake GPUs get when the spec names no model and no known type.
# An 80 GB data-centre card: MIG as an A100/H100 80GB's.
GENERIC = _m("NVIDIA Simulated GPU", 81920, 400, 60, "8.0", 1410, 1593, mig="80gb")

# Other spellings sites use for the same type (keys and values compacted by _key).
ALIASES: Dict[str, str] = {
    "h100sxm": "h100", "h100sxm5": "h100", "h10080gb": "h100", "h100hbm3": "h100", "h10080gbhbm3": "h100",
    "h100sxm580gb": "h100", "h100nvl94gb": "h100nvl", "h200sxm": "h200", "h200141gb": "h200",
    "h800sxm": "h800", "h80080gb": "h800",
    "a10080gb": "a100", "a100sxm": "a100", "a100sxm4": "a100", "a100sxm480gb": "a100",
    "a10040g": "a10040gb", "a10040": "a10040gb", "a100sxm440gb": "a10040gb",
    "a100pcie80gb": "a100pcie", "a10080gbpcie": "a100pcie", "a100pcie40g": "a100pcie40gb",
    "a80080gb": "a800", "a800sxm4": "a800",
    "v10032gb": "v100", "v100sxm2": "v100", "v100sxm232gb": "v100", "v10032g": "v100",
    "v10016g": "v10016gb", "v100sxm216gb": "v10016gb", "v100pcie32gb": "v100pcie",
    "teslat4": "t4", "teslav100": "v100", "teslap100": "p100",
    "a6000": "rtxa6000", "6000ada": "rtx6000ada",
    "4090": "rtx4090", "geforcertx4090": "rtx4090", "3090": "rtx3090", "geforcertx3090": "rtx3090",
    "2080ti": "rtx2080ti", "geforcertx2080ti": "rtx2080ti",
}


def _key(text: str) -> str:
    return re.sub(r"[-_\s]", "", text.lower())


_BY_KEY: Dict[str, GpuModel] = {_key(k): v for k, v in MODELS.items()}
_BY_NAME: Dict[str, GpuModel] = {m.name.lower(): m for m in MODELS.values()}


def known_type(gpu_type: Optional[str]) -> Optional[GpuModel]:
    """The model a Slurm GPU type names, or None where the type is not known here."""
    if not gpu_type:
        return None
    key = _key(gpu_type)
    return _BY_KEY.get(ALIASES.get(key, key))


def _from_name(name: str) -> GpuModel:
    """A model for a name given in the spec: the known model of that name, else GENERIC's
    numbers with the name's own memory size where it says one ("... 48GB ...")."""
    known = _BY_NAME.get(name.strip().lower())
    if known:
        return replace(known, name=name)
    size = re.search(r"(\d+)\s*GB", name, re.IGNORECASE)
    memory = int(size.group(1)) * 1024 if size else GENERIC.memory_mib
    # A card of another size than GENERIC's has no MIG profiles known here.
    return replace(GENERIC, name=name, memory_mib=memory, mig=GENERIC.mig if memory == GENERIC.memory_mib else "")


def model_of(gpu_type: Optional[str], gpu_model: Optional[str] = None) -> GpuModel:
    """The model nvidia-smi shows for a node's fake GPUs (see the module docstring)."""
    if gpu_model:
        return _from_name(gpu_model)
    return known_type(gpu_type) or GENERIC


def mig_instances(node) -> List[Tuple[int, Instance]]:
    """(GPU index on the node, GPU instance) of every MIG instance of a node (a NodeSpec),
    in Slurm's order: slurmd numbers a node's GPUs type by type (by profile name, as the
    node's Gres= lists them), then GPU by GPU, each GPU's in placement order. gres.conf
    lists them in this order, so the i-th is the one Slurm calls GPU i on the node
    (SLURM_STEP_GPUS)."""
    if not node.mig or not node.gpus:
        return []
    model = model_of(node.gpu_type, node.gpu_model)
    placed = place_mig(node.mig, model.mig, model.name)
    return sorted(((g, inst) for g in range(len(node.gpus)) for inst in placed),
                  key=lambda pair: (pair[1].profile, pair[0], placed.index(pair[1])))
