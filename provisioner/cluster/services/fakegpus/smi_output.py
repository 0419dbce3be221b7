"""What simcluster's nvidia-smi shim prints (nvidia_smi.py reads the command line and the
GPUs): the table, -L's list, --query-gpu's and --query-compute-apps' fields, dmon's
columns; and the error a command line it does not answer raises.

Like nvidia_smi.py it needs nothing but Python 3's standard library and never imports
simcluster: the shim runs wherever jobs run (fakegpus/__init__.py: install).
"""

import time

# What the real nvidia-smi exits with.
EXIT_NOT_FOUND = 6
EXIT_USAGE = 2
NO_DEVICES = "No devices were found"
DOCS = "see docs/gpus.md in simcluster"


class ShimError(Exception):
    """A command line this shim does not answer: the message (on stderr, or on stdout where
    the real tool prints it there) and the exit code."""

    def __init__(self, message, code=EXIT_USAGE, on_stdout=False):
        super().__init__(message)
        self.message, self.code, self.on_stdout = message, code, on_stdout



# -- the table ---------------------------------------------------------------------------------

WIDTH = 87  # between the outer bars


def table(gpus, data, now):
    driver, cuda = data.get("driver_version", ""), data.get("cuda_version", "")
    rule = "+" + "-" * WIDTH + "+"
    cells = "+" + "-" * 41 + "+" + "-" * 22 + "+" + "-" * 22 + "+"
    lines = [time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)) + " " * 7, rule,
             "| " + f"NVIDIA-SMI {driver:<22} Driver Version: {driver:<12} CUDA Version: {cuda:<8}".ljust(WIDTH - 1)
             + "|",
             "|" + "-" * 41 + "+" + "-" * 22 + "+" + "-" * 22 + "+",
             "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                      |               MIG M. |",
             "|" + "=" * 41 + "+" + "=" * 22 + "+" + "=" * 22 + "|"]
    for g in gpus:
        if g.get("unreadable"):
            lines += unreadable_rows(g, cells)
            continue
        dc = g["datacenter"]
        fan, ecc, mig, pm = ("N/A", str(g.get("ecc_uncorrected", 0)), mig_mode(g), "On") if dc else \
            ("30%", "N/A", "N/A", "Off")
        power = f"{int(g['power_draw'])}W / {g['power_limit']}W"
        memory = f"{g['memory_used']}MiB / {g['memory_total']}MiB"
        lines += [f"|{g['index']:>4}  {g['name'][:29]:<29}{pm:>4}  | {g['bus_id']} Off |{ecc:>21} |",
                  f"| {fan:>3}  {g['temperature']:>3}C    P0{power:>24} |{memory:>21} |{0:>7}%{'Default':>13} |",
                  f"|{'':41}|{'':22}|{mig:>21} |",
                  cells]
    lines += [" " * (WIDTH + 2), rule,
              "| Processes:".ljust(WIDTH + 1) + "|",
              "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
              "|        ID   ID                                                             Usage      |",
              "|" + "=" * WIDTH + "|",
              "|  No running processes found".ljust(WIDTH + 1) + "|",
              rule]
    return "\n".join(lines) + "\n"


def unreadable_rows(g, cells):
    """A GPU the driver no longer reaches (Xid 79 ...): the table's ERR! fields."""
    return [f"|{g['index']:>4}  {g['name'][:29]:<29}{'On':>4}  | {g['bus_id']} Off |{'ERR!':>21} |",
            f"|ERR!  ERR!  ERR!{'ERR! / ERR!':>24} |{'0MiB / ' + str(g['memory_total']) + 'MiB':>21} |"
            f"{'ERR!':>8}{'Default':>13} |",
            f"|{'':41}|{'':22}|{'ERR!':>21} |",
            cells]


def mig_mode(g):
    return "Enabled" if g.get("mig") else "Disabled"


def list_gpus(gpus):
    return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" + mig_lines(g) for g in gpus)


# -- MIG ---------------------------------------------------------------------------------------

NO_MIG = "No MIG-enabled devices found."


def mig_lines(g):
    """-L's lines of a GPU's MIG devices, under the GPU's own line."""
    return "".join(f"  MIG {m['profile']:<11} Device {m['device']:>2}: (UUID: {m['uuid']})\n" for m in g.get("mig", ()))


def gpu_instance_table(gpus):
    """`nvidia-smi mig -lgi`: a row per GPU instance of the GPUs given."""
    rule = "+" + "-" * 55 + "+"
    lines = [rule, "| GPU instances:".ljust(56) + "|",
             "| GPU   Name             Profile  Instance   Placement  |",
             "|                          ID       ID       Start:Size |",
             "|" + "=" * 55 + "|"]
    for g in gpus:
        for m in g.get("mig", ()):
            lines += [f"|{g['index']:>4}  MIG {m['profile']:<12}{m.get('profile_id', 0):>6}{m['gi']:>9}"
                      f"{m.get('start', 0):>11}:{m.get('size', 1):<6}|", rule]
    return "\n".join(lines) + "\n"


# -- --query-gpu -------------------------------------------------------------------------------

def _na(_g, _c):
    return "[N/A]"


def _fixed(value):
    return lambda _g, _c: value


def _power(key):
    return lambda g, _c: f"{g[key]:.2f}"


# name -> (unit or None, value of a GPU, given the context {"now", "data", "count"})
QUERY_FIELDS = {
    "timestamp": (None, lambda g, c: time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(c["now"]))
                  + f".{int(c['now'] * 1000) % 1000:03d}"),
    "driver_version": (None, lambda g, c: c["data"].get("driver_version", "")),
    "count": (None, lambda g, c: str(c["count"])),
    "name": (None, lambda g, c: g["name"]),
    "serial": (None, lambda g, c: g["serial"] if g["datacenter"] else "[N/A]"),
    "uuid": (None, lambda g, c: g["uuid"]),
    "pci.bus_id": (None, lambda g, c: g["bus_id"]),
    "pci.domain": (None, lambda g, c: "0x" + g["bus_id"][:4]),
    "pci.bus": (None, lambda g, c: "0x" + g["bus_id"][9:11]),
    "pci.device": (None, _fixed("0x00")),
    "index": (None, lambda g, c: str(g["index"])),
    "display_mode": (None, _fixed("Disabled")),
    "display_active": (None, _fixed("Disabled")),
    "persistence_mode": (None, lambda g, c: "Enabled" if g["datacenter"] else "Disabled"),
    "fan.speed": ("%", lambda g, c: "[N/A]" if g["datacenter"] else "30"),
    "pstate": (None, _fixed("P0")),
    "memory.total": ("MiB", lambda g, c: str(g["memory_total"])),
    "memory.reserved": ("MiB", _fixed("0")),
    "memory.used": ("MiB", lambda g, c: str(g["memory_used"])),
    "memory.free": ("MiB", lambda g, c: str(g["memory_total"] - g["memory_used"])),
    "compute_mode": (None, _fixed("Default")),
    "compute_cap": (None, lambda g, c: g["compute_cap"]),
    "utilization.gpu": ("%", _fixed("0")),
    "utilization.memory": ("%", _fixed("0")),
    "ecc.mode.current": (None, lambda g, c: "Enabled" if g["datacenter"] else "[N/A]"),
    "ecc.errors.corrected.volatile.total": (None, lambda g, c: "0" if g["datacenter"] else "[N/A]"),
    "ecc.errors.uncorrected.volatile.total": (None, lambda g, c: str(g.get("ecc_uncorrected", 0))
                                              if g["datacenter"] else "[N/A]"),
    "temperature.gpu": (None, lambda g, c: str(g["temperature"])),
    "temperature.memory": (None, lambda g, c: str(g["memory_temperature"]) if g["datacenter"] else "N/A"),
    "power.management": (None, _fixed("Enabled")),
    "power.draw": ("W", _power("power_draw")),
    "power.limit": ("W", _power("power_limit")),
    "enforced.power.limit": ("W", _power("power_limit")),
    "power.default_limit": ("W", _power("power_limit")),
    "power.max_limit": ("W", _power("power_limit")),
    "clocks.current.graphics": ("MHz", lambda g, c: str(g["sm_clock"])),
    "clocks.current.sm": ("MHz", lambda g, c: str(g["sm_clock"])),
    "clocks.current.memory": ("MHz", lambda g, c: str(g["mem_clock"])),
    "clocks.max.graphics": ("MHz", lambda g, c: str(g["sm_clock"])),
    "clocks.max.sm": ("MHz", lambda g, c: str(g["sm_clock"])),
    "clocks.max.memory": ("MHz", lambda g, c: str(g["mem_clock"])),
    "mig.mode.current": (None, lambda g, c: mig_mode(g) if g["datacenter"] else "[N/A]"),
    "mig.mode.pending": (None, lambda g, c: mig_mode(g) if g["datacenter"] else "[N/A]"),
    "vbios_version": (None, _fixed("96.00.99.00.01")),
}
QUERY_ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "performance_state": "pstate", "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory", "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory", "memory.usage": "utilization.memory", "gpu.util": "utilization.gpu",
    "power.draw.instant": "power.draw", "power.draw.average": "power.draw",
}
# --query-compute-apps: fake GPUs run no processes, so only the header is printed.
APP_FIELDS = {"timestamp": None, "gpu_name": None, "gpu_bus_id": None, "gpu_serial": None, "gpu_uuid": None,
              "pid": None, "process_name": None, "used_gpu_memory": "MiB"}
APP_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}


def parse_fields(spec, known, aliases):
    fields = []
    for raw in spec.split(","):
        name = raw.strip()
        canonical = aliases.get(name.lower(), name.lower())
        if canonical not in known:
            # The real tool's message, on stdout as it prints it.
            raise ShimError(f'Field "{name}" is not a valid field to query.', EXIT_USAGE, on_stdout=True)
        fields.append(canonical)
    return fields


def parse_format(spec):
    """--format=csv[,noheader][,nounits] -> (header, units)."""
    options = {x.strip().lower() for x in (spec or "").split(",") if x.strip()}
    unknown = options - {"csv", "noheader", "nounits"}
    if "csv" not in options or unknown:
        raise ShimError(f'"--format" takes csv[,noheader][,nounits], not "{spec}" ({DOCS})')
    return "noheader" not in options, "nounits" not in options


def csv_header(fields, units_of):
    return ", ".join(f"{f} [{units_of[f]}]" if units_of.get(f) else f for f in fields) + "\n"


# What nvidia-smi still answers of a GPU the driver no longer reaches; other fields: [Unknown Error].
UNREADABLE_KEEPS = ("timestamp", "driver_version", "count", "name", "uuid", "pci.bus_id", "pci.domain", "pci.bus",
                    "pci.device", "index")


def query_rows(gpus, fields, units, ctx):
    out = []
    for g in gpus:
        values = []
        for f in fields:
            unit, value = QUERY_FIELDS[f]
            text = "[Unknown Error]" if g.get("unreadable") and f not in UNREADABLE_KEEPS else value(g, ctx)
            values.append(f"{text} {unit}" if units and unit and not text.startswith("[") else text)
        out.append(", ".join(values) + "\n")
    return "".join(out)


# -- dmon --------------------------------------------------------------------------------------

# Metric groups in the order dmon prints them, whatever the order of -s: (column, unit, value).
DMON_GROUPS = (
    ("p", (("pwr", "W", lambda g: int(g["power_draw"])), ("gtemp", "C", lambda g: g["temperature"]),
           ("mtemp", "C", lambda g: g["memory_temperature"] if g["datacenter"] else "-"))),
    ("u", (("sm", "%", lambda g: 0), ("mem", "%", lambda g: 0), ("enc", "%", lambda g: 0),
           ("dec", "%", lambda g: 0))),
    ("c", (("mclk", "MHz", lambda g: g["mem_clock"]), ("pclk", "MHz", lambda g: g["sm_clock"]))),
    ("v", (("pviol", "%", lambda g: 0), ("tviol", "bool", lambda g: 0))),
    ("m", (("fb", "MB", lambda g: g["memory_used"]), ("bar1", "MB", lambda g: 1))),
    ("e", (("sbecc", "errs", lambda g: 0 if g["datacenter"] else "-"),
           ("dbecc", "errs", lambda g: 0 if g["datacenter"] else "-"), ("pci", "errs", lambda g: 0))),
    ("t", (("rxpci", "MB/s", lambda g: 0), ("txpci", "MB/s", lambda g: 0))),
)


def dmon_columns(select):
    bad = set(select) - {g for g, _ in DMON_GROUPS}
    if bad or not select:
        raise ShimError(f'dmon -s takes metric groups of "pucvmet", not "{select}" ({DOCS})')
    return [col for group, cols in DMON_GROUPS if group in select for col in cols]


def dmon_header(columns, date, clock):
    first = "".join(("Date".ljust(11) if date else "", "Time".ljust(12) if clock else ""))
    second = "".join(("YYYYMMDD".ljust(11) if date else "", "HH:MM:SS".ljust(12) if clock else ""))
    gpu_width = 3 if first else 4
    return ("#" + first + "gpu".rjust(gpu_width) + "".join(f" {c:>5}" for c, _, _ in columns) + "\n"
            + "#" + second + "Idx".rjust(gpu_width) + "".join(f" {u:>5}" for _, u, _ in columns) + "\n")


def dmon_line(g, columns, date, clock, now):
    stamp = time.localtime(now)
    first = "".join((time.strftime("%Y%m%d", stamp).ljust(11) if date else "",
                     time.strftime("%H:%M:%S", stamp).ljust(12) if clock else ""))
    return (" " + first + str(g["index"]).rjust(3 if first else 4)
            + "".join(f" {value(g)!s:>5}" for _, _, value in columns) + "\n")


# -- -q (details) ------------------------------------------------------------------------------

DETAIL_SECTIONS = ("ECC",)  # what -q -d DISPLAY shows beyond each GPU's identity


def details(gpus, data, now, display=""):
    """`nvidia-smi -q [-d ECC]`: each GPU's identity and its ECC mode and error counts
    (simcluster fault gpu --ecc N sets the volatile uncorrectable DRAM count)."""
    wanted = {x.strip().upper() for x in display.split(",") if x.strip()}
    if wanted - set(DETAIL_SECTIONS):
        raise ShimError(f'simcluster\'s nvidia-smi shim does not implement "-q -d {display}" (fake GPUs; -d takes '
                        f'{", ".join(DETAIL_SECTIONS)}; {DOCS})')
    lines = ["", "==============NVSMI LOG==============", "",
             f"{'Timestamp':<38}: {time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(now))}",
             f"{'Driver Version':<38}: {data.get('driver_version', '')}",
             f"{'CUDA Version':<38}: {data.get('cuda_version', '')}", "",
             f"{'Attached GPUs':<38}: {len(gpus)}"]
    for g in gpus:
        lines.append(f"GPU {g['bus_id']}")
        if not wanted:
            lines += [f"    {'Product Name':<34}: {g['name']}", f"    {'Serial Number':<34}: {g['serial']}",
                      f"    {'GPU UUID':<34}: {g['uuid']}", f"    {'Minor Number':<34}: {g['index']}"]
        dc = g["datacenter"]
        bad = "N/A" if not dc else ("ERR!" if g.get("unreadable") else None)
        unc = bad or str(g.get("ecc_uncorrected", 0))
        zero = bad or "0"
        lines += [f"    {'ECC Mode':<34}", f"        {'Current':<30}: {'Enabled' if dc else 'N/A'}",
                  f"        {'Pending':<30}: {'Enabled' if dc else 'N/A'}",
                  f"    {'ECC Errors':<34}", "        Volatile",
                  f"            {'SRAM Correctable':<26}: {zero}", f"            {'SRAM Uncorrectable':<26}: {zero}",
                  f"            {'DRAM Correctable':<26}: {zero}", f"            {'DRAM Uncorrectable':<26}: {unc}",
                  "        Aggregate",
                  f"            {'SRAM Correctable':<26}: {zero}", f"            {'SRAM Uncorrectable':<26}: {zero}",
                  f"            {'DRAM Correctable':<26}: {zero}", f"            {'DRAM Uncorrectable':<26}: {unc}", ""]
    return "\n".join(lines) + "\n"
