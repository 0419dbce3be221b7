"""How a docker cluster's containers start their own daemons as they first start: the boot
script of each machine (boot_script), written into the config directory by the provider's
boot_machines and run by the image's entrypoint (docker/entrypoint.sh; docs/docker.md: the
containers' boot), and the marks in the shared directory by which the nodes' boots wait
for the controller's slurmctld.
"""

from __future__ import annotations

import shlex
from typing import List

from provisioner.cluster.lifecycle.steps import Boot
from provisioner.providers.docker.exec_runner import boot_id
from provisioner.providers.docker.node_containers import SHARED_MOUNT

# The boot scripts (boot_script) in the config directory: /etc/simcluster/boot/<machine>.sh.
BOOT_DIR = "boot"
# Where the controller's boot says its slurmctld takes connections, for the nodes' boots
# (each container has its own network; the shared directory is the one they all see).
BOOT_MARKS = ".simcluster-boot"
CONTROLLER_READY = f"{SHARED_MOUNT}/{BOOT_MARKS}/slurmctld-listening"
# How long a boot waits for each thing it needs (60 s in steps of 10 ms).
BOOT_WAIT_STEPS = 6000


def boot_script(key: str, boots: List[Boot], ready: str = CONTROLLER_READY) -> str:
    """The shell script with which container ``key``'s entrypoint starts its daemons (its
    first argument: the boot directory, BOOT_STATE in the container). Each daemon is
    started as DockerExecRunner.start_daemon starts it (setsid, its log appended to, the
    launch's environment added to the container's) once what it needs exists; its pid is
    written to <boot_id>.pid (whole, by rename) once the process is the daemon itself
    (its command line is the daemon's, not the shell's or setsid's), which is what
    start_daemon adopts. A wait that runs out ends the script: the steps then start what is
    left, and report what is wrong. ``ready``: the file the controller's boot makes once
    slurmctld listens (Boot.port), which the nodes' boots wait for (Boot.after_controller)."""
    lines = [
        "#!/bin/sh",
        f"# Written by `simcluster up`: the daemons of machine {key}, as the steps of `up` start them",
        "# (provisioner/cluster/lifecycle/steps.py: boot_plan; docs/docker.md). $1: the boot directory.",
        'd="$1"',
        f'await() {{ n=0; while [ ! -e "$1" ]; do n=$((n+1)); if [ $n -gt {BOOT_WAIT_STEPS} ]; then '
        'echo "gave up waiting for $1" >&2; exit 1; fi; sleep 0.01; done; }',
        # /proc/net/tcp: no connection is made, so the daemon logs nothing (Runner.listening).
        'listening() { awk -v p="$1" \'{ split($2, a, ":"); if (a[2] == p && $4 == "0A") f = 1 } END { exit !f }\' '
        '/proc/net/tcp /proc/net/tcp6 2>/dev/null; }',
        # $1 id, $2 pid, $3 the daemon's program: the pid is written once the process runs it.
        'started() { n=0; while [ -e "/proc/$2" ] && [ $n -le 1000 ]; do '
        'case "$(tr "\\0" " " <"/proc/$2/cmdline" 2>/dev/null)" in "$3 "*) break;; esac; '
        'n=$((n+1)); sleep 0.002; done; '
        'echo "$2" >"$d/$1.tmp" && mv "$d/$1.tmp" "$d/$1.pid"; }',
    ]
    for boot in boots:
        launch = boot.launch
        lines.append(f"# {launch.key}")
        for need in boot.needs:
            lines.append(f"await {shlex.quote(need)}")
        if boot.after_controller:
            lines.append(f"await {shlex.quote(ready)}")
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in launch.env.items())
        lines.append(f"env {env} setsid {' '.join(map(shlex.quote, launch.argv))} >>{shlex.quote(launch.log)} 2>&1 "
                     "</dev/null &")
        lines.append(f"started {boot_id(launch.argv, launch.log, launch.env)} $! {shlex.quote(launch.argv[0])}")
        if boot.port:
            lines.append(f"n=0; until listening {boot.port:04X}; do n=$((n+1)); "
                         f"[ $n -le {BOOT_WAIT_STEPS} ] || exit 1; sleep 0.01; done")
            lines.append(f": >{shlex.quote(ready)}")
    return "\n".join(lines) + "\n"

