"""nvidia-smi on fake-GPU nodes: the shim (nvidia_smi.py, this package) and what it answers from.

A cluster with fake GPUs gets two files in its config directory, written by the
provider's provisioning step (install) before any node starts:

- fake-gpus.json (render_fake_gpus): every node's GPU count and model as nvidia-smi
  reports it (provisioner/config/gpus.py: the node's gpuModel, else its gpuType's model,
  else a generic one), a MIG node's instances ("mig": node_mig), and the driver and CUDA
  versions shown;
- bin/nvidia-smi: nvidia_smi.py, smi_output.py, gpu_faults.py and gpu_health.py in one executable file (a Python zip
  application: a `#!/usr/bin/env python3` line, then a zip of both and a __main__.py that
  calls nvidia_smi.main), so a docker node mounts one file. Jobs find it first on PATH: the
  local backend's TaskProlog puts that bin/ there (configs/templates/task_prolog.sh.j2),
  docker node containers have it mounted at /usr/local/bin/nvidia-smi, and `simcluster
  env` puts it on the login side's PATH. The same file as bin/gpu-health-check runs the
  GPU health check (gpu_health.py; configs/templates/health_check.sh.j2 runs it).

`simcluster fault gpu` writes gpu-faults.json there too (gpu_faults.py: the one file of
GPU fault state that the shim, the health check and `status` read).

The shim finds fake-gpus.json beside slurm.conf (SLURM_CONF's directory, /etc/slurm,
which is the config directory on docker nodes and, as root, on local ones) or in the
directory above its own. Clusters with real GPUs get neither file: their nodes keep the
real nvidia-smi.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

from provisioner.cluster.services.fakegpus.nvidia_smi import DATA_FILE, gpu_uuid
from provisioner.config.gpus import mig_instances, model_of
from provisioner.config.mig import mig_uuid
from provisioner.config.types import ClusterSpec, NodeSpec

SHIM_SOURCE = Path(__file__).resolve().with_name("nvidia_smi.py")
SHIM_MODULES = (SHIM_SOURCE, SHIM_SOURCE.with_name("smi_output.py"),  # what bin/nvidia-smi holds
                SHIM_SOURCE.with_name("gpu_faults.py"), SHIM_SOURCE.with_name("gpu_health.py"))
SHIM_DIR = "bin"  # in the config directory
SHIM_NAME = "nvidia-smi"
# The GPU health check (gpu_health.py): the same zip application under this name runs it.
HEALTH_CHECK_NAME = "gpu-health-check"
_MAIN = (b"import os\nimport sys\n"
         b"if os.path.basename(sys.argv[0]) == '" + HEALTH_CHECK_NAME.encode() + b"':\n"
         b"    import gpu_health\n    sys.exit(gpu_health.main())\n"
         b"import nvidia_smi\nsys.exit(nvidia_smi.main())\n")
# Docker node containers: where the shim is mounted, on every PATH.
CONTAINER_SHIM = "/usr/local/bin/nvidia-smi"
# What the shim reports as the driver: a release of the data-centre driver branch that
# supports every model in provisioner/config/gpus.py's table (H100 ... T4).
DRIVER_VERSION = "535.183.06"
CUDA_VERSION = "12.2"

__all__ = ["CONTAINER_SHIM", "DATA_FILE", "HEALTH_CHECK_NAME", "SHIM_NAME", "gpu_uuid", "health_check_path", "install",
           "mig_uuid", "node_data", "node_mig", "render_fake_gpus", "shim_dir", "shim_path"]


def node_data(node: NodeSpec) -> Dict:
    """One node's entry in fake-gpus.json."""
    model = model_of(node.gpu_type, node.gpu_model)
    return {"gpus": len(node.gpus), "name": model.name, "memory_mib": model.memory_mib,
            "power_limit_w": model.power_limit_w, "idle_power_w": model.idle_power_w,
            "compute_cap": model.compute_cap, "sm_clock_mhz": model.sm_clock_mhz,
            "mem_clock_mhz": model.mem_clock_mhz, "datacenter": model.datacenter}


def node_mig(cluster: str, node: NodeSpec) -> Dict[str, List[Dict]]:
    """A MIG node's "mig" entry in fake-gpus.json: {"<GPU index on the node>": [{"profile",
    "gi" (GPU instance id), "uuid" (MIG-...), "profile_id", "start", "size" (placement)},
    ...]}, in gres.conf's order; {} for a node without MIG. The shim and the metrics
    exporter read it."""
    out: Dict[str, List[Dict]] = {}
    for g, inst in mig_instances(node):
        out.setdefault(str(g), []).append({"profile": inst.profile, "gi": inst.gi,
                                           "uuid": mig_uuid(cluster, node.name, g, inst.gi),
                                           "profile_id": inst.profile_id, "start": inst.start, "size": inst.size})
    return out


def render_fake_gpus(spec: ClusterSpec) -> Optional[str]:
    """fake-gpus.json's text for a cluster with fake GPUs; None for one without."""
    if not spec.fake_gpus:
        return None
    nodes = {n.name: node_data(n) for n in spec.nodes if n.gpus}
    for n in spec.nodes:
        mig = node_mig(spec.name, n) if n.gpus else {}
        if mig:
            nodes[n.name]["mig"] = mig
    data = {"cluster": spec.name, "driver_version": DRIVER_VERSION, "cuda_version": CUDA_VERSION, "nodes": nodes}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def shim_dir(config_dir: Path) -> Path:
    return Path(config_dir) / SHIM_DIR


def shim_path(config_dir: Path) -> Path:
    return shim_dir(config_dir) / SHIM_NAME


def shim_bytes() -> bytes:
    """bin/nvidia-smi: the shim's modules as a Python zip application (as zipapp makes one),
    with fixed timestamps so that the same sources give the same file."""
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w") as z:  # stored, not deflated: no zlib needed where jobs run
        entries = [(m.name, m.read_bytes()) for m in SHIM_MODULES]
        entries.append(("__main__.py", _MAIN))
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def install(spec: ClusterSpec, config_dir: Path) -> List[Path]:
    """Write fake-gpus.json and bin/nvidia-smi into ``config_dir`` (on this host) for a
    cluster with fake GPUs; nothing for one without. Returns the files written."""
    text = render_fake_gpus(spec)
    if text is None:
        return []
    config_dir = Path(config_dir)
    data = config_dir / DATA_FILE
    data.write_text(text)
    shim = shim_path(config_dir)
    shim.parent.mkdir(parents=True, exist_ok=True)
    # Written in place (same inode): a docker node container mounts this very file.
    shim.write_bytes(shim_bytes())
    os.chmod(shim, 0o755)
    check = health_check_path(config_dir)
    check.write_bytes(shim_bytes())
    os.chmod(check, 0o755)
    os.chmod(shim.parent, 0o755)  # jobs may run as other users than the cluster's owner
    return [data, shim, check]


def health_check_path(config_dir: Path) -> Path:
    """bin/gpu-health-check: the zip application that runs gpu_health.py (HealthCheckProgram's helper)."""
    return shim_dir(config_dir) / HEALTH_CHECK_NAME
