"""What Slurm's own parser reads from a slurm.conf: the reference the --like reader is held to.

Run as ``python -m tests.unit.like.slurm_reference FILE``: it loads the host's libslurm
(Debian's libslurm38, Slurm 22.05), calls ``slurm_conf_init(FILE)`` -- the parse slurmctld
and every Slurm command make, src/common/read_config.c over src/common/parse_config.c --
and prints as JSON the NodeName records (host lists expanded by Slurm's hostlist_create,
CPUs as Slurm computes them, RealMemory, Gres, Features, Port, State), the PartitionName
records and the NodeSet records. Slurm ends the process with status 1 and its error lines
on stderr when it refuses the file, so one process reads one file.

The structures below are those of src/common/read_config.h in 22.05 (slurm_conf_node_t,
slurm_conf_partition_t up to the fields read here, slurm_conf_nodeset_t).
"""

from __future__ import annotations

import ctypes as c
import json
import sys
from typing import List, Optional

LIBSLURM = "libslurm.so.38"


class _Node(c.Structure):
    _fields_ = [("nodenames", c.c_char_p), ("hostnames", c.c_char_p), ("addresses", c.c_char_p),
                ("bcast_addresses", c.c_char_p), ("gres", c.c_char_p), ("feature", c.c_char_p),
                ("port_str", c.c_char_p), ("cpu_bind", c.c_uint32), ("cpus", c.c_uint16),
                ("cpu_spec_list", c.c_char_p), ("boards", c.c_uint16), ("tot_sockets", c.c_uint16),
                ("cores", c.c_uint16), ("core_spec_cnt", c.c_uint16), ("threads", c.c_uint16),
                ("real_memory", c.c_uint64), ("mem_spec_limit", c.c_uint64), ("reason", c.c_char_p),
                ("state", c.c_char_p), ("tmp_disk", c.c_uint32), ("tres_weights_str", c.c_char_p),
                ("weight", c.c_uint32)]


class _Partition(c.Structure):
    # Only the leading fields, up to those read here: the layout before them must be exact.
    _fields_ = [("allow_alloc_nodes", c.c_char_p), ("allow_accounts", c.c_char_p), ("allow_groups", c.c_char_p),
                ("allow_qos", c.c_char_p), ("alternate", c.c_char_p), ("billing_weights_str", c.c_char_p),
                ("cpu_bind", c.c_uint32), ("cr_type", c.c_uint16), ("def_mem_per_cpu", c.c_uint64),
                ("default_flag", c.c_bool), ("default_time", c.c_uint32), ("deny_accounts", c.c_char_p),
                ("deny_qos", c.c_char_p), ("disable_root_jobs", c.c_uint8), ("exclusive_user", c.c_uint16),
                ("grace_time", c.c_uint32), ("hidden_flag", c.c_bool), ("job_defaults_list", c.c_void_p),
                ("lln_flag", c.c_bool), ("max_cpus_per_node", c.c_uint32), ("max_share", c.c_uint16),
                ("max_time", c.c_uint32), ("max_mem_per_cpu", c.c_uint64), ("max_nodes", c.c_uint32),
                ("min_nodes", c.c_uint32), ("name", c.c_char_p), ("nodes", c.c_char_p)]


class _NodeSet(c.Structure):
    _fields_ = [("feature", c.c_char_p), ("name", c.c_char_p), ("nodes", c.c_char_p)]


def _text(value: Optional[bytes]) -> Optional[str]:
    return value.decode() if value is not None else None


def _expand(lib: c.CDLL, expr: Optional[bytes]) -> Optional[List[str]]:
    """Slurm's expansion of a host list; None where hostlist_create refuses it."""
    if not expr:
        return []
    handle = lib.slurm_hostlist_create(expr)
    if not handle:
        return None
    names = []
    while True:
        name = lib.slurm_hostlist_shift(handle)
        if not name:
            break
        names.append(c.string_at(name).decode())  # not freed: the process reads one file and ends
    lib.slurm_hostlist_destroy(handle)
    return names


def read(path: str) -> dict:
    lib = c.CDLL(LIBSLURM)
    lib.slurm_conf_init.argtypes = [c.c_char_p]
    lib.slurm_hostlist_create.argtypes = [c.c_char_p]
    lib.slurm_hostlist_create.restype = c.c_void_p
    lib.slurm_hostlist_shift.argtypes = [c.c_void_p]
    lib.slurm_hostlist_shift.restype = c.c_void_p
    lib.slurm_hostlist_destroy.argtypes = [c.c_void_p]
    if lib.slurm_conf_init(path.encode()) != 0:
        raise SystemExit(1)
    out: dict = {"nodes": [], "partitions": [], "nodesets": []}
    nodes = c.POINTER(c.POINTER(_Node))()
    for i in range(lib.slurm_conf_nodename_array(c.byref(nodes))):
        n = nodes[i].contents
        out["nodes"].append({"names": _expand(lib, n.nodenames), "cpus": n.cpus, "memory": n.real_memory,
                             "gres": _text(n.gres), "features": _text(n.feature), "port": _text(n.port_str),
                             "state": _text(n.state), "sockets": n.tot_sockets, "cores": n.cores,
                             "threads": n.threads, "weight": n.weight, "tmpDisk": n.tmp_disk})
    parts = c.POINTER(c.POINTER(_Partition))()
    for i in range(lib.slurm_conf_partition_array(c.byref(parts))):
        p = parts[i].contents
        out["partitions"].append({"name": _text(p.name), "nodes": _text(p.nodes), "names": _expand(lib, p.nodes),
                                  "default": bool(p.default_flag)})
    sets = c.POINTER(c.POINTER(_NodeSet))()
    for i in range(lib.slurm_conf_nodeset_array(c.byref(sets))):
        s = sets[i].contents
        out["nodesets"].append({"name": _text(s.name), "nodes": _text(s.nodes), "feature": _text(s.feature)})
    return out


if __name__ == "__main__":
    print(json.dumps(read(sys.argv[1])))
