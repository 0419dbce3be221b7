#!/usr/bin/env python3
"""nvidia-smi for simcluster's fake GPUs: the forms job scripts use, answered from the spec.

`up` copies this file into a fake-GPU cluster's config directory as bin/nvidia-smi
(provisioner/cluster/services/fakegpus), beside fake-gpus.json, the nodes' GPU models. Jobs find it
first on PATH (the local backend's TaskProlog; /usr/local/bin/nvidia-smi in docker node
containers). It runs wherever jobs run, so it needs nothing but Python 3's standard library
and never imports simcluster.

What it shows: the GPUs of the job step (SLURM_STEP_GPUS, else SLURM_JOB_GPUS: Slurm's
indices on the node) on the node SLURMD_NODENAME names, with their index on the node, the
node's model name, a stable fake UUID (from the cluster, node and index) and a stable PCI
bus id per index. A job without GPUs sees none ("No devices were found", exit 6), as with
device cgroups in production. Outside a job, every GPU of the node SLURMD_NODENAME names;
off the cluster's nodes (a login shell) the machine's own nvidia-smi if it has one, else
none.

Forms: the table (`nvidia-smi`), -L, --query-gpu=F,... --format=csv[,noheader][,nounits],
--query-compute-apps (no processes), -q [-d ECC], -i, -l/--loop, -f/--filename, dmon (-s, -d, -c, -o,
-f, -i), mig -lgi, --version, -h. On a MIG node (fake-gpus.json's "mig") -L lists the MIG
devices under their GPU, and a job's Slurm indices count MIG devices (step_mig). Anything
else: one line on stderr and exit 2. docs/gpus.md has the
full list.
"""

import hashlib
import json
import os
import signal
import sys
import time

# Run as bin/nvidia-smi (a zip of this file and smi_output.py, fakegpus/__init__.py: install)
# its sibling is a top-level module; in simcluster's package (its tests) a relative one.
if __package__:
    from .smi_output import (APP_ALIASES, APP_FIELDS, DOCS, EXIT_NOT_FOUND, EXIT_USAGE, NO_DEVICES, QUERY_ALIASES,
                             QUERY_FIELDS, ShimError, csv_header, dmon_columns, dmon_header, dmon_line, list_gpus,
                             parse_fields, parse_format, query_rows, table)
    from .smi_output import NO_MIG, gpu_instance_table
else:
    from smi_output import NO_MIG, gpu_instance_table
    from smi_output import (APP_ALIASES, APP_FIELDS, DOCS, EXIT_NOT_FOUND, EXIT_USAGE, NO_DEVICES, QUERY_ALIASES,
                            QUERY_FIELDS, ShimError, csv_header, dmon_columns, dmon_header, dmon_line, list_gpus,
                            parse_fields, parse_format, query_rows, table)
# GPU faults (`simcluster fault gpu`): gpu-faults.json beside fake-gpus.json.
if __package__:
    from .gpu_faults import EXIT_GPU_LOST, FAULTS_FILE, apply_faults, lost_message, node_faults, read_faults
    from .smi_output import details
else:
    from gpu_faults import EXIT_GPU_LOST, FAULTS_FILE, apply_faults, lost_message, node_faults, read_faults
    from smi_output import details


DATA_FILE = "fake-gpus.json"
# PCI bus numbers of the 8 GPUs of an HGX H100 board, in nvidia-smi's (bus) order; GPUs
# past the eighth continue in the next PCI domain.
BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def not_implemented(what):
    return ShimError(f"simcluster's nvidia-smi shim does not implement {what} (fake GPUs; {DOCS})")


# -- the GPUs ----------------------------------------------------------------------------------

def _digest(cluster, node, index):
    return hashlib.sha256(f"simcluster-gpu/{cluster}/{node}/{index}".encode()).hexdigest()


def gpu_uuid(cluster, node, index):
    """GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, the same for the same cluster, node and index."""
    h = _digest(cluster, node, index)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def bus_id(index):
    """The PCI bus id of the GPU with this index on its node (the same on every node, as on
    identical production machines)."""
    return f"{index // len(BUSES):08X}:{BUSES[index % len(BUSES)]:02X}:00.0"


def gpus_of_node(data, node):
    """Every GPU of ``node`` as a dict of what nvidia-smi reports (idle values)."""
    spec = data.get("nodes", {}).get(node)
    if not spec:
        return []
    cluster = data.get("cluster", "")
    gpus = []
    for index in range(int(spec.get("gpus", 0))):
        h = _digest(cluster, node, index)
        gpus.append({
            "index": index, "node": node, "name": spec["name"], "uuid": gpu_uuid(cluster, node, index),
            "serial": str(1650000000000 + int(h[32:48], 16) % 10 ** 11), "bus_id": bus_id(index),
            "memory_total": int(spec["memory_mib"]), "memory_used": 0, "power_limit": int(spec["power_limit_w"]),
            # Idle readings that differ a little from GPU to GPU, as real ones do.
            "power_draw": int(spec["idle_power_w"]) + (index % 4) * 0.5 + 0.12,
            "temperature": 30 + index % 5, "memory_temperature": 36 + index % 4,
            "sm_clock": int(spec["sm_clock_mhz"]), "mem_clock": int(spec["mem_clock_mhz"]),
            "compute_cap": spec.get("compute_cap", "8.0"), "datacenter": bool(spec.get("datacenter", True)),
        })
    return with_mig(gpus, spec)


# -- MIG ---------------------------------------------------------------------------------------

def with_mig(gpus, spec):
    """Each GPU with "mig": its MIG devices from fake-gpus.json's node entry ("mig": {"<GPU
    index>": [{"profile", "gi", "uuid", ...}, ...]}), each numbered as nvidia-smi -L numbers
    them on the GPU ("device"); [] on a GPU without MIG."""
    layout = spec.get("mig") or {}
    for g in gpus:
        g["mig"] = [dict(m, device=d) for d, m in enumerate(layout.get(str(g["index"]), []))]
    return gpus


def slurm_order(gpus):
    """(GPU, MIG device) pairs of a MIG node in Slurm's order: slurmd numbers a node's GPUs
    type by type (profile name), then GPU by GPU, then in placement order
    (provisioner/config/gpus.py: mig_instances; gres.conf lists them so)."""
    return sorted(((g, m) for g in gpus for m in g["mig"]), key=lambda p: (p[1]["profile"], p[0]["index"],
                                                                          p[1]["device"]))


def step_mig(gpus, wanted):
    """A job's view of a MIG node: Slurm's GPU indices there count the MIG devices, so the
    GPUs shown are those holding one of the job's MIG devices, each with only those."""
    chosen = {(g["index"], m["device"]) for i, (g, m) in enumerate(slurm_order(gpus)) if i in wanted}
    shown = [dict(g, mig=[m for m in g["mig"] if (g["index"], m["device"]) in chosen]) for g in gpus]
    return [g for g in shown if g["mig"]]


def data_paths(env, argv0):
    """Where fake-gpus.json may be: $SIMCLUSTER_FAKE_GPUS, beside slurm.conf ($SLURM_CONF's
    directory, /etc/slurm), and the config directory this file was copied into (bin/..)."""
    found = []
    if env.get("SIMCLUSTER_FAKE_GPUS"):
        found.append(env["SIMCLUSTER_FAKE_GPUS"])
    if env.get("SLURM_CONF"):
        found.append(os.path.join(os.path.dirname(env["SLURM_CONF"]), DATA_FILE))
    found.append(os.path.join("/etc/slurm", DATA_FILE))
    here = os.path.dirname(os.path.realpath(argv0))
    found += [os.path.join(os.path.dirname(here), DATA_FILE), os.path.join(here, DATA_FILE)]
    return found


def load_data(env, argv0):
    for path in data_paths(env, argv0):
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        data["_faults"] = read_faults(os.path.join(os.path.dirname(path), FAULTS_FILE))
        return data
    return None


def step_gpu_indices(env):
    """Slurm's indices of the step's GPUs on this node, or None outside a job."""
    if "SLURM_JOB_ID" not in env:
        return None
    ids = env["SLURM_STEP_GPUS"] if "SLURM_STEP_GPUS" in env else env.get("SLURM_JOB_GPUS", "")
    return {int(x) for x in ids.split(",") if x.strip().isdigit()}


def visible_gpus(data, env):
    """The GPUs this process sees (module docstring)."""
    node = env.get("SLURMD_NODENAME", "")
    gpus = apply_faults(gpus_of_node(data or {}, node), node_faults((data or {}).get("_faults") or {}, node))
    wanted = step_gpu_indices(env)
    if wanted is not None and any(g["mig"] for g in gpus):
        return step_mig(gpus, wanted)
    return gpus if wanted is None else [g for g in gpus if g["index"] in wanted]


def select_ids(gpus, ids):
    """-i/--id: indices, UUIDs or PCI bus ids, comma-separated; None if one matches no GPU."""
    chosen = []
    for item in (x.strip() for x in ids.split(",") if x.strip()):
        low = item.lower()
        match = [g for g in gpus if str(g["index"]) == item or g["uuid"].lower() == low
                 or g["bus_id"].lower() == low or g["bus_id"].lower().endswith(":" + low)]
        if not match:
            return None
        chosen += [g for g in match if g not in chosen]
    return sorted(chosen, key=lambda g: g["index"])


def real_nvidia_smi(env, argv0):
    """The machine's own nvidia-smi further on PATH (not this file), or None."""
    me = os.path.realpath(argv0)
    for d in env.get("PATH", "").split(os.pathsep):
        path = os.path.join(d or ".", "nvidia-smi")
        if os.access(path, os.X_OK) and os.path.isfile(path) and os.path.realpath(path) != me:
            return path
    return None


# -- command line ------------------------------------------------------------------------------

class Args:
    """What was asked, parsed by hand: nvidia-smi takes `--opt=V`, `--opt V` and `-o V`."""

    def __init__(self):
        self.mode = "table"
        self.query = None
        self.format = None
        self.ids = None
        self.loop = None
        self.filename = None
        self.select = "puc"
        self.delay = 1.0
        self.count = None
        self.options = ""
        self.display = ""  # -q -d ECC,...


def _take(argv, i, arg, long_names, short_names):
    """The value of option ``arg`` at argv[i] if it is one of the names, and the next index."""
    for name in long_names:
        if arg == name:
            if i + 1 >= len(argv):
                raise ShimError(f'option "{name}" needs a value')
            return argv[i + 1], i + 2
        if arg.startswith(name + "="):
            return arg[len(name) + 1:], i + 1
    for name in short_names:
        if arg == name:
            if i + 1 >= len(argv):
                raise ShimError(f'option "{name}" needs a value')
            return argv[i + 1], i + 2
    return None, i


def _number(text, what, minimum):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ShimError(f'{what} takes a number of at least {minimum:g}, not "{text}"')
    return value


def _dmon_output_options(a, value):
    a.options = value.upper()
    if set(a.options) - set("DT"):
        raise ShimError(f'dmon -o takes D, T or DT, not "{value}"')


# Options without a value: {option: the mode it selects}, outside dmon and in it.
FLAGS = {"-h": "help", "--help": "help", "--version": "version", "-L": "list", "--list-gpus": "list",
         "-q": "details", "--query": "details"}
DMON_FLAGS = {"-h": "dmon-help", "--help": "dmon-help"}
# Options with a value, tried in this order: (long name, short name or "", where it applies:
# "any", "dmon" or "main" (outside dmon), what its value sets in Args).
VALUE_OPTIONS = (
    ("--id", "-i", "any", lambda a, v: setattr(a, "ids", v)),
    ("--filename", "-f", "any", lambda a, v: setattr(a, "filename", v)),
    ("--select", "-s", "dmon", lambda a, v: setattr(a, "select", v)),
    ("--delay", "-d", "dmon", lambda a, v: setattr(a, "delay", _number(v, "dmon -d", 1))),
    ("--count", "-c", "dmon", lambda a, v: setattr(a, "count", int(_number(v, "dmon -c", 1)))),
    ("--options", "-o", "dmon", _dmon_output_options),
    ("--query-gpu", "", "main", lambda a, v: a.__dict__.update(mode="query", query=v)),
    ("--query-compute-apps", "", "main", lambda a, v: a.__dict__.update(mode="apps", query=v)),
    ("--format", "", "main", lambda a, v: setattr(a, "format", v)),
    ("--display", "-d", "main", lambda a, v: setattr(a, "display", v)),
    ("--loop", "-l", "main", lambda a, v: setattr(a, "loop", _number(v, "-l/--loop", 1))),
    ("--loop-ms", "-lms", "main", lambda a, v: setattr(a, "loop", _number(v, "-lms/--loop-ms", 1) / 1000.0)),
)


# `nvidia-smi mig` options: {option: the mode it selects}.
MIG_FLAGS = {"-lgi": "mig-lgi", "--list-gpu-instances": "mig-lgi", "-h": "mig-help", "--help": "mig-help"}


def parse_mig_args(argv):
    """`nvidia-smi mig -lgi [-i ID]`: the GPU instance table (other mig forms change the
    layout, which is the spec's here)."""
    a = Args()
    a.mode = "mig-help"
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in MIG_FLAGS:
            a.mode, i = MIG_FLAGS[arg], i + 1
            continue
        value, nxt = _take(argv, i, arg, ("--id",), ("-i",))
        if nxt == i:
            raise not_implemented(f'"mig {arg}" (the MIG layout is the cluster spec\'s mig key)')
        a.ids, i = value, nxt
    return a


def parse_args(argv):
    a = Args()
    i = 0
    if argv and argv[0] == "mig":
        return parse_mig_args(argv)
    if argv and argv[0] == "dmon":
        a.mode, i = "dmon", 1
    while i < len(argv):
        arg, dmon = argv[i], a.mode == "dmon"
        mode = (DMON_FLAGS if dmon else FLAGS).get(arg)
        if mode:
            a.mode, i = mode, i + 1
            continue
        for long_name, short_name, where, apply in VALUE_OPTIONS:
            if where != "any" and (where == "dmon") != dmon:
                continue
            value, nxt = _take(argv, i, arg, (long_name,), (short_name,) if short_name else ())
            if nxt != i:
                apply(a, value)
                i = nxt
                break
        else:
            raise not_implemented(f'"dmon {arg}"' if dmon else f'"{arg}"')
    if a.mode in ("query", "apps") and a.format is None:
        raise ShimError(f'"--format=csv" must be given with "--query-{"gpu" if a.mode == "query" else "compute-apps"}"')
    return a


HELP = """NVIDIA System Management Interface -- simcluster's shim for fake GPUs

    nvidia-smi [-i ID] [-l SEC | -lms MS] [-f FILE]          the summary table
    nvidia-smi -L                                            list the GPUs and their UUIDs
    nvidia-smi -q [-d ECC]                                   details: identity and ECC error counts
    nvidia-smi --query-gpu=index,name,uuid,memory.total,... --format=csv[,noheader][,nounits]
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv    (no processes run on fake GPUs)
    nvidia-smi dmon [-i ID] [-s pucvmet] [-d SEC] [-c COUNT] [-o DT] [-f FILE]
    nvidia-smi mig -lgi [-i ID]                              the MIG GPU instances
    nvidia-smi --version

The GPUs are the job step's (SLURM_STEP_GPUS, else SLURM_JOB_GPUS) on the node
SLURMD_NODENAME names. Everything else answers "not implemented" (exit 2): see
docs/gpus.md in simcluster.
"""
DMON_HELP = "usage: nvidia-smi dmon [-i ID] [-s pucvmet] [-d SEC] [-c COUNT] [-o DT] [-f FILE]\n"
MIG_HELP = "usage: nvidia-smi mig -lgi [-i ID]    list the GPU instances (fake MIG: the spec's mig key)\n"


def mig_lgi(gpus, stdout):
    """`nvidia-smi mig -lgi`: the GPU instances of the GPUs shown, as the real tool prints
    them; on GPUs without MIG its message and exit status."""
    if not any(g["mig"] for g in gpus):
        stdout.write(NO_MIG + "\n")
        return EXIT_NOT_FOUND
    stdout.write(gpu_instance_table(gpus))
    return 0


def version_text(data):
    driver, cuda = data.get("driver_version", ""), data.get("cuda_version", "")
    return (f"NVIDIA-SMI version  : {driver}\nNVML version        : {driver.rsplit('.', 1)[0]}\n"
            f"DRIVER version      : {driver}\nCUDA Version        : {cuda}\n")


class Output:
    """stdout, or -f FILE (written anew); every write is flushed at once, so a monitor that
    runs in the background until killed leaves whole lines behind."""

    def __init__(self, filename, stdout):
        self.fh = open(filename, "w") if filename else stdout
        self.close_it = bool(filename)

    def write(self, text):
        self.fh.write(text)
        self.fh.flush()

    def close(self):
        if self.close_it:
            self.fh.close()


def run(argv, env, stdout, stderr, argv0, clock=time.time, sleep=time.sleep):
    """The whole command; returns the exit status. Every argument is checked before anything
    is written (a bad field leaves no -f file behind)."""
    args = parse_args(argv)
    if args.mode == "help":
        stdout.write(HELP)
        return 0
    if args.mode == "dmon-help":
        stdout.write(DMON_HELP)
        return 0
    if args.mode == "mig-help":
        stdout.write(MIG_HELP)
        return 0
    columns = dmon_columns(args.select) if args.mode == "dmon" else []
    header, units = parse_format(args.format) if args.mode in ("query", "apps") else (True, True)
    fields = (parse_fields(args.query, QUERY_FIELDS, QUERY_ALIASES) if args.mode == "query" else
              parse_fields(args.query, APP_FIELDS, APP_ALIASES) if args.mode == "apps" else [])
    data = load_data(env, argv0)
    if args.mode == "version":
        stdout.write(version_text(data or {}))
        return 0
    if not env.get("SLURMD_NODENAME"):
        # Not on a node of the cluster (a login shell after `simcluster env`): this
        # machine's own nvidia-smi, if it has one, as on a login node.
        real = real_nvidia_smi(env, argv0)
        if real:
            os.execve(real, [real] + list(argv), env)
    elif data is None:
        stderr.write("simcluster's nvidia-smi shim: no fake-gpus.json found in "
                     f"{', '.join(data_paths(env, argv0))}\n")
    gpus = visible_gpus(data, env)
    if args.ids is not None:
        gpus = select_ids(gpus, args.ids) or []
    lost = [g for g in gpus if g.get("lost")]
    gpus = [g for g in gpus if not g.get("lost")]
    if lost and args.mode in ("table", "details"):
        # A GPU that fell off the bus: the real tool prints this and nothing else.
        stdout.write("".join(lost_message(g) + "\n" for g in lost))
        return EXIT_GPU_LOST
    if not gpus:
        stdout.write(NO_DEVICES + "\n")
        return EXIT_NOT_FOUND
    if args.mode == "mig-lgi":
        return mig_lgi(gpus, stdout)
    out = Output(args.filename, stdout)
    try:
        if args.mode == "dmon":
            return dmon(out, gpus, columns, args, clock, sleep)
        if args.mode == "apps":
            if header:
                out.write(csv_header(fields, APP_FIELDS))
            return 0
        first = True
        while True:
            now = clock()
            if args.mode == "list":
                out.write(list_gpus(gpus))
            elif args.mode == "details":
                out.write(details(gpus, data or {}, now, args.display))
            elif args.mode == "query":
                if header and first:
                    out.write(csv_header(fields, {f: QUERY_FIELDS[f][0] for f in fields}))
                out.write(query_rows(gpus, fields, units, {"now": now, "data": data or {}, "count": len(gpus)}))
            else:
                out.write(table(gpus, data or {}, now))
            first = False
            if args.loop is None or args.mode == "list":
                return 0
            sleep(args.loop)
    finally:
        out.close()


def dmon(out, gpus, columns, args, clock, sleep):
    """A header, then a line per GPU every -d seconds, -c times or until killed."""
    date, clock_col = "D" in args.options, "T" in args.options
    out.write(dmon_header(columns, date, clock_col))
    sample = 0
    while True:
        now = clock()
        out.write("".join(dmon_line(g, columns, date, clock_col, now) for g in gpus))
        sample += 1
        if args.count is not None and sample >= args.count:
            return 0
        sleep(args.delay)


def main():
    # As a C program does: a closed pipe (`nvidia-smi dmon | head`) ends it quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return run(sys.argv[1:], dict(os.environ), sys.stdout, sys.stderr, sys.argv[0])
    except ShimError as exc:
        (sys.stdout if exc.on_stdout else sys.stderr).write(exc.message + "\n")
        return exc.code
    except KeyboardInterrupt:  # Ctrl-C ends a loop or dmon, as it does the real one
        return 0
    except OSError as exc:  # -f FILE that cannot be written
        sys.stderr.write(f"simcluster's nvidia-smi shim: {exc}\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
