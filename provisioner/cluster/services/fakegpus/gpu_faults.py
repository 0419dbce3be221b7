"""GPU faults of fake GPUs as the driver reports them: gpu-faults.json, the Xid table, the
kernel-log lines, and what nvidia-smi and the health check see of a faulted GPU.

`simcluster fault gpu NODE` (provisioner/cluster/faults/gpu.py) writes the fault state to
ONE file, gpu-faults.json in the cluster's config directory beside fake-gpus.json, which
everything reads (the nvidia-smi shim, the health check, `status`, a metrics exporter):

    {"node1": {"0": {"xid": 79, "ecc_errors": 0, "lost": false, "since": "2026-11-28T12:00:00+00:00"}}}

A node or GPU absent from it is healthy. The Xid also goes to the node's kernel-log
stand-in, <config dir>/kmsg/<node> (kmsg_path), in the real driver's line format.

Like nvidia_smi.py this module needs nothing but Python 3's standard library and never
imports simcluster: it is part of bin/nvidia-smi and bin/gpu-health-check.
"""

import json
import os
import time

FAULTS_FILE = "gpu-faults.json"
KMSG_DIR = "kmsg"  # in the config directory: one file per node, the node's dmesg stand-in

# Xids the driver logs, as NVIDIA's Xid catalogue describes them: (what it says, whether a
# site's health check drains the node for it, whether the CUDA processes on the GPU die).
# Xids 13, 31 and 43 are an application's own errors: the GPU stays usable.
XIDS = {
    13: ("Graphics Engine Exception", False, False),
    31: ("GPU memory page fault", False, False),
    43: ("GPU stopped processing", False, False),
    45: ("Preemptive cleanup, due to previous errors", False, False),
    48: ("Double Bit ECC Error", True, True),
    61: ("Internal micro-controller breakpoint/warning", True, False),
    62: ("Internal micro-controller halt", True, True),
    63: ("ECC page retirement or row remapping recording event", False, False),
    64: ("ECC page retirement or row remapper recording failure", True, False),
    74: ("NVLink Error", True, True),
    79: ("GPU has fallen off the bus", True, True),
    92: ("High single-bit ECC error rate", True, False),
    94: ("Contained ECC error", True, True),
    95: ("Uncontained ECC error", True, True),
    119: ("GSP RPC timeout", True, True),
    120: ("GSP error", True, True),
}
# Xids after which the GPU answers no query (nvidia-smi prints ERR! in its fields).
UNREADABLE_XIDS = (62, 79, 119, 120)


def xid_text(xid):
    return XIDS.get(xid, ("unknown Xid", True, False))[0]


def xid_drains(xid):
    """Whether a health check takes the node out of service for this Xid (unknown ones: yes)."""
    return XIDS.get(xid, ("", True, False))[1]


def xid_kills(xid):
    return XIDS.get(xid, ("", True, False))[2]


def fault_kills(fault):
    """Whether the CUDA processes on a GPU with this fault die (their job step with them)."""
    return bool(fault.get("lost")) or (fault.get("xid") is not None and xid_kills(fault["xid"]))


def iso_now(now=None):
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() if now is None else now))


def read_faults(path):
    """{node: {index (str): fault}} from gpu-faults.json; {} when it is missing or unreadable."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_faults(path, faults):
    """Replace gpu-faults.json at once (a reader never sees half a file); nodes without a
    fault left are dropped."""
    faults = {node: gpus for node, gpus in faults.items() if gpus}
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(faults, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def node_faults(faults, node):
    """{index (int): fault} of one node."""
    return {int(i): f for i, f in (faults.get(node) or {}).items() if str(i).isdigit()}


def faults_path_beside(data_file):
    """gpu-faults.json in the directory of fake-gpus.json."""
    return os.path.join(os.path.dirname(data_file), FAULTS_FILE)


def kmsg_path(config_dir, node):
    return os.path.join(config_dir, KMSG_DIR, node)


def pci_address(bus_id):
    """nvidia-smi's bus id 00000000:18:00.0 -> the driver's PCI:0000:18:00."""
    domain, bus, rest = bus_id.split(":")
    return f"PCI:{domain[-4:]}:{bus}:{rest.split('.')[0]}"


def kmsg_line(uptime, bus_id, fault, pid=0, process="python3"):
    """The line the driver writes to the kernel log for ``fault``, e.g.
    ``[ 8643.123456] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``"""
    where = pci_address(bus_id)
    if fault.get("xid") is not None:
        who = f"pid={pid}, name={process}, " if pid else "pid='<unknown>', name=<unknown>, "
        text = f"NVRM: Xid ({where}): {fault['xid']}, {who}{xid_text(fault['xid'])}."
    elif fault.get("lost"):
        text = f"NVRM: GPU at {where}: GPU has fallen off the bus."
    else:
        text = (f"NVRM: Xid ({where}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
                f"(DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.")
    return f"[{uptime:12.6f}] {text}\n"


# -- what the driver reports of a faulted GPU (nvidia-smi, the health check) -------------------

def apply_faults(gpus, faults):
    """The GPUs of one node (nvidia_smi.gpus_of_node's dicts) with their faults: a copy of
    each with ``fault`` (the record, or None), ``lost`` and ``unreadable`` (ERR! fields)
    and ``ecc_uncorrected``."""
    out = []
    for g in gpus:
        fault = faults.get(g["index"])
        g = dict(g, fault=fault, lost=bool(fault and fault.get("lost")),
                 unreadable=bool(fault and fault.get("xid") in UNREADABLE_XIDS),
                 ecc_uncorrected=int((fault or {}).get("ecc_errors") or 0))
        if g["fault"] and g["fault"].get("xid") == 48:
            g["ecc_uncorrected"] = max(g["ecc_uncorrected"], 1)  # a DBE is an uncorrectable ECC error
        out.append(g)
    return out


def lost_message(g):
    """What nvidia-smi prints for a GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST)."""
    return (f"Unable to determine the device handle for GPU{g['bus_id']}: GPU is lost.  "
            "Reboot the system to recover this GPU")


EXIT_GPU_LOST = 15  # nvidia-smi's exit status: a GPU has fallen off the bus or is otherwise inaccessible


def problems(expected, gpus):
    """What a health check finds on a node: ``expected`` GPUs, ``gpus`` as apply_faults
    returns them. A list of (index, text), e.g. (0, "Xid 79 (GPU has fallen off the bus)")."""
    found = []
    for g in gpus:
        fault = g.get("fault") or {}
        if g.get("lost"):
            seen = sum(1 for x in gpus if not x.get("lost"))
            found.append((g["index"], f"lost (nvidia-smi sees {seen} of {expected} GPUs)"))
        elif fault.get("xid") is not None and xid_drains(fault["xid"]):
            found.append((g["index"], f"Xid {fault['xid']} ({xid_text(fault['xid'])})"))
        elif g.get("ecc_uncorrected"):
            found.append((g["index"], f"{g['ecc_uncorrected']} uncorrectable ECC errors"))
    if len(gpus) < expected:
        found.append((len(gpus), f"missing (nvidia-smi sees {len(gpus)} of {expected} GPUs)"))
    return found
