"""`make test`: the whole suite as two pytest sessions at once, so that it fits its time on 2 cores.

    python scripts/test_lanes.py [PYTEST ARGS...]

Lane "main" is everything but tests/vm: real daemons and dockerd, mostly waiting on Slurm's
timers and polls (the cores are idle most of its time). Lane "vm" is tests/vm: qemu guests
under TCG, CPU-bound. Run one after the other they take the sum of both; run at once, about
the longer one. The VM lane is niced (its qemu processes inherit it) so that the main lane's
daemons, whose answers tests wait for, get a core when they need one, and the guests take
what is left.

The lanes keep out of each other's way: the VM lane has its own test home root (the main
lane's end-of-session check counts every daemon under its own root as left running) and its
own pytest base temp directory. The main lane prints as it goes; the VM lane's output goes to
a log file, printed whole when both have ended. Exit status: 0 if both passed, else the
first non-zero of (main, vm). Ctrl-C stops both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VM_NICE = 10


def _default_sigint() -> None:
    # A process started in the background of a non-interactive shell inherits SIGINT ignored,
    # and pytest keeps it so: give each lane the default, as a terminal does.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _vm_lane_preexec() -> None:
    _default_sigint()
    os.nice(VM_NICE)


def main(argv: list) -> int:
    py = sys.executable
    tmp = Path(tempfile.gettempdir())
    vm_log = tmp / "simcluster-test-vm-lane.log"
    vm_env = dict(os.environ, SIMCLUSTER_TEST_HOME_ROOT=str(tmp / "simcluster-tests-vm"))
    vm_cmd = [py, "-m", "pytest", "-q", "-rs", "--durations=15", "-p", "no:cacheprovider",
              f"--basetemp={tmp / 'pytest-vm-lane'}", *argv, "tests/vm"]
    main_cmd = [py, "-m", "pytest", "-q", "-rs", "--durations=30", *argv, "--ignore=tests/vm", "tests"]
    print(f"test lanes: tests/vm runs beside the rest (nice {VM_NICE}); its output: {vm_log}", flush=True)
    started = time.monotonic()
    with open(vm_log, "w") as log:
        vm = subprocess.Popen(vm_cmd, cwd=REPO, env=vm_env, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, preexec_fn=_vm_lane_preexec)
        try:
            main_rc = subprocess.call(main_cmd, cwd=REPO, preexec_fn=_default_sigint)
            main_s = time.monotonic() - started
            if vm.poll() is None:
                print(f"\ntest lanes: the main lane ended after {main_s:.0f}s; waiting for tests/vm", flush=True)
            vm_rc = vm.wait()
        except KeyboardInterrupt:
            vm.send_signal(signal.SIGINT)
            vm.wait()
            raise
    vm_s = time.monotonic() - started
    print(f"\n======== tests/vm (ran beside the rest; {vm_log}) ========", flush=True)
    sys.stdout.write(vm_log.read_text(errors="replace"))
    print(f"test lanes: main exit {main_rc} after {main_s:.0f}s, vm exit {vm_rc} after {vm_s:.0f}s", flush=True)
    return main_rc or vm_rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
