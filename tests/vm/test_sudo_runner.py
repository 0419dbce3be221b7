"""Case c of the VM matrix: GitHub's runner shape on a stock Debian 12 (systemd, cgroup v2):
the user `runner`, not root, with passwordless sudo. As that user, from a copy of the checkout
in their home: `make setup`, the action's install and up steps, a later step's jobs, the
failure step's log bundle, `down --sudo`. The cluster is root's (`up --sudo`) with everything
a root cluster has on this host (a network namespace and hostname per node, limits through
cgroup/v2, GPU device nodes), serves `runner` (their jobs run as them, in their directories),
and a sudo log shows that sudo ran nothing but apt-get and simcluster's own commands.

The same flow on this machine (cgroup v1, a throwaway user): tests/integration/test_sudo_user.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest

from tests.integration.test_sudo_user import simcluster_as_root
from tests.vm.image import REPO

pytestmark = [pytest.mark.vm]

USER = "runner"
HOME = f"/home/{USER}"
CLONE = f"{HOME}/simcluster"
GH = f"{HOME}/gh"
SUDO_LOG = "/var/log/sudo-runner.log"
NAME = "vmc"


def as_runner(vm, command: str, timeout: float = 600):
    """``command`` in a login shell of runner's, as a workflow step has it (runner's own ssh
    connection: the rig keeps one master connection per guest user)."""
    return vm.run(command, user=USER, timeout=timeout)


def sudo_commands(vm) -> list:
    text = vm.run(f"cat {SUDO_LOG} 2>/dev/null").stdout
    return [m.group(1) for m in re.finditer(r"COMMAND=(.*)$", text, re.M)]


def test_runner_with_sudo_gets_roots_cluster(bookworm_vm, vm_timings):
    vm = bookworm_vm
    timings = vm_timings.setdefault("bookworm", {})
    # A sudo log of everything runner runs through sudo, from here on.
    vm.run(f"printf 'Defaults:{USER} logfile={SUDO_LOG}, loglinelen=0\\n' > /etc/sudoers.d/zz-runner-log && "
           f"chmod 0440 /etc/sudoers.d/zz-runner-log", check=True)
    # root's ssh connection is open (the command above): runner's commands still run as runner
    probe = as_runner(vm, "id -u && sudo -n true")
    assert probe.returncode == 0 and probe.stdout.strip() not in ("", "0"), probe.stdout + probe.stderr
    vm.run(f"rm -f {SUDO_LOG}", check=True)  # the log starts after this probe
    vm.put_checkout(REPO, CLONE)
    vm.run(f"chown -R {USER}: {CLONE}", check=True)
    try:
        # 1. make setup as runner: sudo for apt-get only (the image has the packages: none).
        started = time.monotonic()
        setup = as_runner(vm, f"cd {CLONE} && make setup", timeout=1800)
        timings["runner_make_setup"] = round(time.monotonic() - started, 1)
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        ran = sudo_commands(vm)
        assert all(re.match(r"/usr/bin/(env DEBIAN_FRONTEND=noninteractive )?apt-get ", c) for c in ran), ran

        # 2-3. The action's install and up steps, as GitHub runs them.
        gh_env = (f"export GITHUB_ENV={GH}/env GITHUB_PATH={GH}/path GITHUB_OUTPUT={GH}/output "
                  f"RUNNER_TEMP={GH}/tmp GITHUB_ACTION_PATH={CLONE}; ")
        assert as_runner(vm, f"mkdir -p {GH}/tmp && touch {GH}/env {GH}/path {GH}/output").returncode == 0
        started = time.monotonic()
        install = as_runner(vm, gh_env + f"INPUT_BACKEND=local bash {CLONE}/scripts/action/install.sh", timeout=1800)
        timings["runner_action_install"] = round(time.monotonic() - started, 1)
        assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
        started = time.monotonic()
        up = as_runner(vm, gh_env + f"export PATH=\"$(head -1 {GH}/path):$PATH\"; INPUT_NAME={NAME} INPUT_NODES=2 "
                    f"INPUT_GPUS=fake:2 bash {CLONE}/scripts/action/up.sh", timeout=1200)
        timings["runner_action_up"] = round(time.monotonic() - started, 1)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert f"::notice::simcluster up runs as root through sudo (input sudo: auto; {USER} is not root)" in up.stdout
        assert f"up '{NAME}': as root through 'sudo -n'" in up.stderr
        assert simcluster_as_root(sudo_commands(vm)) == ["up"]

        # 4. A later step, with only what the action exported (GITHUB_ENV, GITHUB_PATH).
        later = (f"set -a; . {GH}/env; set +a; export PATH=\"$(tac {GH}/path | paste -sd:):$PATH\"; "
                 f"mkdir -p {HOME}/work && cd {HOME}/work && ")
        step = as_runner(vm, later + "srun -N2 hostname | sort && "
                      "sbatch --wait -N2 -o out.txt -e err.txt --wrap 'id -u; srun -N2 hostname | sort' >/dev/null && "
                      "cat out.txt && stat -c %u out.txt && id -u && cat err.txt >&2", timeout=600)
        # (err.txt: what slurmstepd says into the job's stderr on this host, shown, not judged here)
        print(f"job stderr on the cgroup v2 guest:\n{step.stderr}")
        assert step.returncode == 0, step.stdout + step.stderr
        lines = step.stdout.split()
        uid = lines[-1]
        assert lines == ["node1", "node2", uid, "node1", "node2", uid, uid], step.stdout

        # 5. The user's shell: env, status (what root's cluster has on cgroup v2), fake GPUs.
        shell = as_runner(vm, f"export PATH={CLONE}/.venv/bin:$PATH; eval \"$(simcluster env --name {NAME})\" && "
                       f"sinfo -h -o %D && simcluster status --name {NAME} --json", timeout=300)
        assert shell.returncode == 0, shell.stdout + shell.stderr
        count, _, status_json = shell.stdout.partition("\n")
        status = json.loads(status_json)
        assert count == "2"
        assert status["node_network"].startswith("a network namespace each"), status["node_network"]
        assert status["node_cgroups"].startswith("enforced"), status["node_cgroups"]
        devices = vm.run(f"stat -c %F /var/lib/simcluster/{NAME}/dev/nvidia0 /var/lib/simcluster/{NAME}/dev/nvidia1",
                         check=True).stdout.split("\n")
        assert devices[:2] == ["character special file"] * 2, devices

        # The failure step's bundle: root's daemon logs, through sudo, handed to runner.
        logs = as_runner(vm, gh_env + f"export PATH=\"$(head -1 {GH}/path):$PATH\"; INPUT_NAME={NAME} UP_SUDO=true "
                      f"bash {CLONE}/scripts/action/logs.sh && stat -c '%u %s' {GH}/tmp/simcluster-logs-{NAME}/logs/"
                      f"slurmctld.log", timeout=300)
        assert logs.returncode == 0, logs.stdout + logs.stderr
        owner, size = logs.stdout.split()[-2:]
        assert owner == uid and int(size) > 0

        # 6. down --sudo: nothing of the cluster is left; sudo ran nothing else.
        down = as_runner(vm, f"{CLONE}/.venv/bin/simcluster down --sudo --name {NAME}", timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        tag = hashlib.sha1(f"/var/lib/simcluster/{NAME}".encode()).hexdigest()[:6]  # network_plan.tag_of
        left = vm.run(f"ls -d /var/lib/simcluster/{NAME} 2>/dev/null; pgrep -af '/var/lib/[s]imcluster/{NAME}/'; "
                      f"ip netns | grep -c simcluster-{tag}")
        assert left.stdout.split() == ["0"], left.stdout
        ran = sudo_commands(vm)
        others = [c for c in ran if not re.match(r"/usr/bin/(env DEBIAN_FRONTEND=noninteractive )?apt-get |"
                                                 r"/usr/bin/true$", c)]
        assert simcluster_as_root(others) == ["up", "export-logs", "down"], ran
        assert [c for c in others if not simcluster_as_root([c])][0].startswith("/usr/bin/chown -R "), ran
    finally:
        vm.run(f"{CLONE}/.venv/bin/python -m provisioner down --name {NAME}; rm -f /etc/sudoers.d/zz-runner-log",
               timeout=300)
