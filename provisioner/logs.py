"""`export-logs`: everything a bug report needs, in one directory."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path
from typing import List, Sequence

from provisioner import __version__
from provisioner.procs import pid_alive
from provisioner.render import SECRET_FILES, redact_secrets
from provisioner.slurm import scontrol_show
from provisioner.state import ClusterState


def _version(argv: List[str]) -> str:
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=10)
        return p.stdout.strip().splitlines()[0] if p.stdout.strip() else f"(no output, exit {p.returncode})"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(unavailable: {exc})"


def copy_files(src_dir: Path, dest: Path, skip: Sequence[str] = ()) -> List[Path]:
    """Copy the files of ``src_dir`` (not subdirectories) into ``dest`` for a bug report,
    with the passwords in SECRET_FILES redacted; names in ``skip`` stay out."""
    written = []
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


def export_logs(st: ClusterState, out_dir: Path) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = st.layout
    written: List[Path] = []

    def put(rel: str, text: str) -> None:
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    for src_dir, dest in ((layout.etc, "config"), (layout.log, "logs")):
        written += copy_files(src_dir, out_dir / dest)
    state_copy = json.loads(layout.state_file.read_text()) if layout.state_file.exists() else {}
    state_copy["alive"] = {k: pid_alive(p) for k, p in st.pids.items()}
    put("state.json", json.dumps(state_copy, indent=2, sort_keys=True) + "\n")
    for what in ("node", "job", "partition", "config"):
        put(f"scontrol-show-{what}.txt", scontrol_show(layout.slurm_conf, what))
    if st.cluster_spec.accounting:
        from provisioner.actions.accounting import debug_reports
        for rel, text in debug_reports(st).items():
            put(rel, text)
    versions = {
        "simcluster": __version__,
        "slurmctld": _version(["slurmctld", "-V"]),
        "slurmd": _version(["slurmd", "-V"]),
        "munged": _version(["munged", "--version"]),
        **({"mariadbd": _version(["mariadbd", "--version"])} if st.cluster_spec.accounting else {}),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "os": _os_release(),
    }
    put("versions.txt", "".join(f"{k}: {v}\n" for k, v in versions.items()))
    return written


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()
