"""`--sudo`: run one simcluster command as root through `sudo -n`, for a user who may use sudo.

A local cluster made by an ordinary user is rootless: its nodes share the host's network and
hostname and nothing is confined (no network namespace, no cgroup, no GPU device node can be
made without root). A user who may run sudo without a password (GitHub's hosted runners:
user `runner`, `NOPASSWD: ALL`) can have root's cluster instead, and still use it as
themselves: root's clusters serve every local user (docs/users.md), so their `simcluster env`,
`sbatch`, `srun` and `status` work from their own shell and their jobs run as them.

Only the command the user marked with `--sudo` runs as root, never anything by surprise:
`sudo -n` (never a password prompt: a sudo that asks for one is an error that says so), the
same Python and simcluster the user runs, and their SIMCLUSTER_* settings and PYTHONPATH, so
root runs the very code and finds the very clusters the user means. Everything else (`make
setup` but for apt-get, `env`, the user's jobs) runs as the user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from provisioner.errors import UsageError

FLAG = "--sudo"
# What root's run keeps from the user's environment (sudo resets the rest): where the
# clusters are and which templates (SIMCLUSTER_*), and which simcluster code (PYTHONPATH).
PASSED_ON_PREFIXES = ("SIMCLUSTER_",)
PASSED_ON = ("PYTHONPATH",)
# Why `up --sudo` makes root's cluster: what a node gets only as root (progress line).
ROOT_GIVES = "each node its own network namespace and hostname, cgroup limits where the host has them, GPU device nodes"


def invoking_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


# How root's Python starts simcluster: `python -m provisioner`, but never with the working
# directory first on sys.path (where -m and -c put it): a `provisioner/` in the directory the
# user stands in must not be what root runs. Python 3.11 has -P for that; before it, a line
# of code that drops that entry and starts the CLI.
BOOTSTRAP = ("import sys; sys.path[:1] = [p for p in sys.path[:1] if p]; sys.argv[0] = 'simcluster'; "
             "from provisioner.cli.main import main; main()")


def python_argv(python: str, version: Sequence[int] = tuple(sys.version_info[:2])) -> List[str]:
    """``python`` running simcluster's CLI without the working directory on sys.path."""
    return [python, "-P", "-m", "provisioner"] if tuple(version) >= (3, 11) else [python, "-c", BOOTSTRAP]


def code_root() -> str:
    """The directory this simcluster's `provisioner` package was imported from, where that is
    not an installed site (a checkout, an editable install): root imports it from there too."""
    import provisioner
    root = os.path.dirname(os.path.dirname(os.path.abspath(provisioner.__file__)))
    return "" if os.path.basename(root) in ("site-packages", "dist-packages") else root


def root_argv(args: Sequence[str], environ: Mapping[str, str], python: str, sudo: str = "sudo",
              code: str = "") -> List[str]:
    """The command line that runs ``simcluster ARGS`` as root: ``sudo -n`` (no prompt, ever),
    then `env` with the user's settings that root must share (sudo resets the environment;
    passing them as `env` arguments needs no SETENV in sudoers), then this same Python
    running this same simcluster (``code``: where it was imported from, first on
    PYTHONPATH). ``--sudo`` itself is left out of ARGS."""
    kept: Dict[str, str] = {k: v for k, v in sorted(environ.items())
                            if k.startswith(PASSED_ON_PREFIXES) or k in PASSED_ON}
    if code:
        kept["PYTHONPATH"] = os.pathsep.join([code] + [p for p in kept.get("PYTHONPATH", "").split(os.pathsep)
                                                       if p and p != code])
    return [sudo, "-n", "--", shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in kept.items()),
            *python_argv(python), *(a for a in args if a != FLAG)]


def check_sudo(sudo: Optional[str]) -> None:
    """Raise a one-line UsageError unless this user may run sudo without a password."""
    user = invoking_user()
    fix = "leave out --sudo for a rootless cluster (docs/requirements.md#what-needs-root)"
    if sudo is None:
        raise UsageError("--sudo: no sudo program on this machine", f"install it as root (apt-get install sudo) and let "
                         f"{user} use it, run simcluster as root, or {fix}")
    probe = subprocess.run([sudo, "-n", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise UsageError(f"--sudo: {user} cannot run sudo without a password here (sudo -n true: {said})",
                         f"run 'sudo -v' first (sudo then asks for no password for a while), give {user} "
                         f"NOPASSWD in /etc/sudoers.d, run simcluster as root, or {fix}")


def rerun_as_root(what: str, progress: Callable[[str], None], args: Optional[Sequence[str]] = None) -> int:
    """Run this simcluster command line (``args``, default sys.argv[1:]) again as root through
    ``sudo -n``; say first that it does, and why (``what``). Returns root's exit status."""
    sudo = shutil.which("sudo")
    check_sudo(sudo)
    argv = root_argv(sys.argv[1:] if args is None else args, os.environ, sys.executable, sudo or "sudo", code_root())
    progress(f"{what}: as root through 'sudo -n' (--sudo; {invoking_user()} is not root)")
    return subprocess.run(argv).returncode
