"""`export-logs`: everything a bug report needs, in one directory, for every backend.

config/ (the rendered configs, passwords redacted, no munge key), logs/<machine>/ (every
daemon log, read where the daemon runs), state.json (with what is alive now),
scontrol-show-*.txt, the accounting reports on accounting clusters, versions.txt; then
whatever the provider adds (capabilities.ExtraLogs; docker: inspect output and container
logs). A read-only cluster (capabilities.ReadOnly: deployed, over SSH) gives its config
files and daemon liveness itself; the rest is read the same way, through its runners.
"""

from __future__ import annotations

import json
import platform
import posixpath
import shutil
from pathlib import Path
from typing import List, Sequence, Tuple

from provisioner import __version__
from provisioner.cluster.model.handle import Cluster, log_name
from provisioner.cluster.model.provider import ExtraLogs, ReadOnly
from provisioner.cluster.services import accounting
from provisioner.render import SECRET_FILES, redact_secrets

# Secrets never leave the machine: munge's key and the JWT key of --rest clusters.
SKIP_CONFIGS = ("munge.key", "jwt_hs256.key")


def copy_files(src_dir: Path, dest: Path, skip: Sequence[str] = SKIP_CONFIGS) -> List[Path]:
    """Copy the files of ``src_dir`` (not subdirectories) into ``dest`` for a bug report,
    with the passwords in SECRET_FILES redacted; names in ``skip`` stay out."""
    written: List[Path] = []
    if not src_dir.is_dir():
        return written
    for f in sorted(src_dir.iterdir()):
        if f.is_file() and f.name not in skip:
            target = dest / f.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if f.name in SECRET_FILES:  # never a password in a bug report
                target.write_text(redact_secrets(f.read_text()))
            else:
                shutil.copyfile(f, target)
            written.append(target)
    return written


def _daemon_logs(cluster: Cluster, keys: Sequence[str]) -> List[Tuple[str, str, str]]:
    """(daemon key, file on its machine, name in the bundle) for each daemon's log and .out
    file. Flat names on every backend: a node's own munged (docker) is munged-<node>.log."""
    found = []
    for key in keys:
        for ext in (".log", ".out"):
            found.append((key, f"{log_name(key)}{ext}", f"{key.replace(':', '-')}{ext}"))
    if cluster.spec.accounting:
        found += [("slurmdbd", name, name) for name in ("mariadb-install.log", "sacctmgr-setup.log")]
    return found


def export_logs(cluster: Cluster, out_dir: Path) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: List[Path] = []

    def put(rel: str, data) -> None:
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
        written.append(path)

    if isinstance(cluster.provider, ReadOnly):
        for fname, data in sorted(cluster.provider.config_files(cluster.state, cluster.placement).items()):
            if fname not in SKIP_CONFIGS:
                put(f"config/{fname}", redact_secrets(data.decode(errors="replace")) if fname in SECRET_FILES else data)
    else:
        written += copy_files(cluster.placement.config_dir, out_dir / "config")
    alive = cluster.liveness()
    for key, source, name in _daemon_logs(cluster, list(alive)):
        # The log directory of the daemon's machine (this host's for the metrics exporter).
        data = cluster.daemon_runner(key).read_file(f"{posixpath.dirname(cluster.daemon_log(key))}/{source}")
        if data is not None:
            put(f"logs/{name}", data)
    state = json.loads(json.dumps(cluster.state.__dict__, default=str))
    state["alive"] = alive
    put("state.json", json.dumps(state, indent=2, sort_keys=True) + "\n")
    client = cluster.client
    for what in ("node", "job", "partition", "config"):
        put(f"scontrol-show-{what}.txt", client.show(what))
    if cluster.spec.accounting:
        for rel, argv in accounting.DEBUG_REPORTS:
            res = client.run(argv, timeout=15)
            put(rel, res.stdout + (f"\n(exit {res.rc}: {res.stderr.strip()})" if res.rc else ""))
    ctl = cluster.runner()
    versions = {"simcluster": __version__}
    for daemon, argv in (("slurmctld", ["slurmctld", "-V"]), ("slurmd", ["slurmd", "-V"]),
                         ("munged", ["munged", "--version"]),
                         *((("mariadbd", ["mariadbd", "--version"]),) if cluster.spec.accounting else ())):
        res = ctl.run(argv, timeout=10)
        text = (res.stdout or res.stderr).strip()
        versions[daemon] = text.splitlines()[0] if text else f"(unavailable: exit {res.rc})"
    if isinstance(cluster.provider, ExtraLogs):
        versions.update(cluster.provider.versions())
    versions.update({"python": platform.python_version(), "kernel": platform.release(), "os": _os_release()})
    put("versions.txt", "".join(f"{k}: {v}\n" for k, v in versions.items()))
    if isinstance(cluster.provider, ExtraLogs):
        written += cluster.provider.extra_logs(cluster.state, out_dir)
    return written


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()
