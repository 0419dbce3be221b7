"""Fixtures for the VM tests: one booted VM per Debian suite per session, logs on failure.

    def test_x(trixie_vm):                    # booted, checkout in /root/simcluster
        vm_make_setup(trixie_vm)              # `make setup` once per VM (cached per session)
        res = trixie_vm.run("cd /root/simcluster && .venv/bin/simcluster status")

Fixtures: ``vm_machines`` (session: ``.get(suite)`` boots on first use and reuses the VM for
the rest of the session; every VM is stopped at the session's end, on failure and on Ctrl-C
too), ``bookworm_vm`` and ``trixie_vm`` (its two VMs), ``vm_timings`` (a dict a test may add
its measured seconds to; printed at the end of the run and written to
``<cache>/timings-<suite>.json``). When a test that used a VM fails, the VM's serial log,
journal, dmesg and a simcluster export-logs bundle are copied into the test's tmp dir
(``.../vm-logs``), and the path is printed.

Skips only where the host cannot run the VMs (no qemu-system-x86_64, qemu-img, debootstrap,
ssh; not root and no passwordless sudo): ``make setup-vm`` installs the tools.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.vm.image import REPO, Image, build, cache_root, cached_image
from tests.vm.machine import Machine, qemu_missing

CHECKOUT = "/root/simcluster"  # where the checkout under test lands in each guest
# Tests point `simcluster test --logs-dir` here: copied out with the rest when a test fails.
GUEST_LOG_ROOT = "/root/vm-test-logs"


class VMs:
    """The session's VMs, booted on first use, one per suite."""

    def __init__(self, tmp_root: Path, timings: Dict[str, Dict[str, float]]) -> None:
        self.tmp_root = tmp_root
        self.timings = timings
        self.images: Dict[str, Image] = {}
        self.machines: Dict[str, Machine] = {}
        self.setup_done: Dict[str, bool] = {}

    def image(self, suite: str) -> Image:
        if suite not in self.images:
            why = qemu_missing()
            if why:
                pytest.skip(f"cannot run VMs on this host: {why}")
            started = time.monotonic()
            cached = cached_image(suite)
            self.images[suite] = cached or build(suite)
            t = self.timings.setdefault(suite, {})
            t["image_cached" if cached else "image_build_cold"] = round(time.monotonic() - started, 1)
        return self.images[suite]

    def get(self, suite: str) -> Machine:
        if suite not in self.machines:
            image = self.image(suite)
            machine = Machine(image, self.tmp_root / suite)
            self.machines[suite] = machine  # registered first: stopped at the end even if boot fails
            machine.start()
            t = self.timings.setdefault(suite, {})
            t["boot"] = machine.boot_seconds
            started = time.monotonic()
            machine.put_checkout(REPO, CHECKOUT)
            t["checkout_copy"] = round(time.monotonic() - started, 1)
        return self.machines[suite]

    def stop_all(self) -> None:
        for machine in self.machines.values():
            machine.stop()


_TIMINGS: Dict[str, Dict[str, float]] = {}


@pytest.fixture(scope="session")
def vm_timings() -> Dict[str, Dict[str, float]]:
    return _TIMINGS


@pytest.fixture(scope="session")
def vm_machines(tmp_path_factory, vm_timings):
    vms = VMs(tmp_path_factory.mktemp("vms"), vm_timings)
    _SESSION_VMS.append(vms)
    try:
        yield vms
    finally:
        vms.stop_all()
        _SESSION_VMS.remove(vms)


# The session's VMs by the fixture that boots them.
SUITE_FIXTURES = {"bookworm_vm": "bookworm", "trixie_vm": "trixie"}
_SESSION_VMS: List[VMs] = []
_LAST_USER: Dict[str, str] = {}  # suite -> the node id of the last test that uses its VM


def _uses_session_vm(item) -> bool:
    return any(f in item.fixturenames for f in SUITE_FIXTURES)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests of the session's VMs first, then those that boot VMs of their own (the
    deploy rig): each session VM is stopped after its last test (below), so that an idle
    guest, which under TCG still takes half a core for its timers, never runs beside a rig.
    Only the tests under tests/vm move, among their own places."""
    here = Path(__file__).parent
    places = [i for i, item in enumerate(items) if here in Path(str(item.fspath)).parents]
    ordered = sorted((items[i] for i in places), key=lambda item: not _uses_session_vm(item))
    for i, item in zip(places, ordered):
        items[i] = item


def pytest_collection_finish(session):
    _LAST_USER.clear()
    for item in session.items:
        for fixture, suite in SUITE_FIXTURES.items():
            if fixture in item.fixturenames:
                _LAST_USER[suite] = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Stop a session VM once the last test that uses it is done (its logs, on failure, are
    copied before: pytest_runtest_makereport)."""
    for suite, last in _LAST_USER.items():
        if last == item.nodeid:
            for vms in _SESSION_VMS:
                machine = vms.machines.pop(suite, None)  # a later get() would boot it again
                if machine is not None:
                    machine.stop()


@pytest.fixture(scope="session")
def trixie_vm(vm_machines) -> Machine:
    return vm_machines.get("trixie")


@pytest.fixture(scope="session")
def bookworm_vm(vm_machines) -> Machine:
    return vm_machines.get("bookworm")


def vm_make_setup(vm: Machine) -> float:
    """`make setup` in the guest's checkout, the way the README has a user do it; once per VM.
    Returns the seconds it took (0 when it already ran). Fails the test with its output."""
    if getattr(vm, "_make_setup_done", False):
        return 0.0
    started = time.monotonic()
    vm.run(f"cd {CHECKOUT} && make setup", timeout=1200, check=True)
    vm._make_setup_done = True
    seconds = round(time.monotonic() - started, 1)
    _TIMINGS.setdefault(vm.image.suite, {})["make_setup"] = seconds
    return seconds


# SKIPs that come from what the cluster was asked for, not from the host: basic.container
# needs `make setup-containers` (the SPANK plugin), which the README's first command leaves out.
SKIPS_NOT_FROM_THE_HOST = {"basic.container"}
# Per-check time limit: the guest runs under qemu's TCG, 20-30x slower than a host for CPU
# work, and several checks (mpi, cpus-per-task, dependency, requeue) take 2-3 minutes there
# against verify's 60 s default for basic; nothing here asserts on time.
CHECK_TIMEOUT_S = 300


def guest_platform(vm: Machine) -> Tuple[str, str, str, str]:
    """(Debian version, PID 1's name, /sys/fs/cgroup's file system, `slurmctld -V`) of the guest:
    what a platform case claims its host is."""
    res = vm.run("cat /etc/debian_version; ps -p 1 -o comm=; stat -fc %T /sys/fs/cgroup; "
                 "/usr/sbin/slurmctld -V", check=True)
    version, init, cgroupfs, slurm = res.stdout.split("\n")[:4]
    return version, init, cgroupfs, slurm


def vm_test_basic(vm: Machine, name: str, timings: Dict[str, float]) -> Tuple[subprocess.CompletedProcess, Dict, str]:
    """`make setup`, then the README's CI command (`simcluster test --nodes 2 --fake-gpus 2
    --suite basic`) in the guest, as cluster ``name``. Fails the test unless the report passes
    with no check FAIL and none SKIP for a reason of the host. Returns the command's result,
    its checks by name and their lines (for the caller's own assertions); records its seconds
    in ``timings``."""
    vm_make_setup(vm)
    started = time.monotonic()
    res = vm.run(f"cd {CHECKOUT} && .venv/bin/simcluster test --name {name} --nodes 2 --fake-gpus 2 "
                 f"--suite basic --json --timeout {CHECK_TIMEOUT_S} --logs-dir {GUEST_LOG_ROOT}/{name}",
                 timeout=1800)
    timings["simcluster_test_basic"] = round(time.monotonic() - started, 1)
    report, checks, lines = verify_report(res.stdout, res.returncode, res.stderr)
    timings["verify_basic"] = report["seconds"]
    assert_report_passed(report, res.returncode, res.stderr, f"the {vm.image.suite} host")
    return res, checks, lines


def verify_report(stdout: str, returncode: int = 0, stderr: str = "") -> Tuple[Dict, Dict, str]:
    """A `verify --json` report (``stdout``): the report, its checks by name and one line per
    check (for assertion messages). Fails the test where there is no report."""
    assert stdout.strip(), f"no JSON report (exit {returncode}):\n{stderr[-6000:]}"
    report = json.loads(stdout)
    checks = {c["name"]: c for c in report["checks"]}
    return report, checks, "\n".join(f"{c['name']}: {c['status']} {c['message']}" for c in report["checks"])


def assert_report_passed(report: Dict, returncode: int, stderr: str, host: str) -> None:
    """The report passed: exit 0, no check FAIL, and none SKIP for a reason of ``host``."""
    _, checks, lines = verify_report(json.dumps(report))
    failed = [n for n, c in checks.items() if c["status"] == "FAIL"]
    host_skips = [n for n, c in checks.items() if c["status"] == "SKIP" and n not in SKIPS_NOT_FROM_THE_HOST]
    assert returncode == 0 and report["passed"] and not failed, f"failed: {failed}\n{lines}\nstderr:\n{stderr[-4000:]}"
    assert not host_skips, f"SKIP caused by {host}: {host_skips}\n{lines}"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"vm_rep_{rep.when}", rep)


@pytest.fixture(autouse=True)
def _vm_logs_on_failure(request, tmp_path):
    """After a failed test, copy the logs of every VM it used into its tmp dir: serial log,
    journal, dmesg, an export-logs bundle of each cluster still there, and GUEST_LOG_DIRS."""
    yield
    failed = any(getattr(getattr(request.node, f"vm_rep_{w}", None), "failed", False)
                 for w in ("setup", "call"))
    if not failed:
        return
    machines: Dict[int, Machine] = {}
    for value in request.node.funcargs.values():
        for vm in (value.machines.values() if isinstance(value, VMs) else [value]):
            if isinstance(vm, Machine):
                machines[id(vm)] = vm  # a VM reached through two fixtures: its logs once
    for vm in machines.values():
        dest = tmp_path / "vm-logs" / vm.image.suite
        vm.run(f"cd {CHECKOUT} && for c in $(.venv/bin/simcluster list --json 2>/dev/null | "
               f"python3 -c 'import json,sys; print(*[c[\"name\"] for c in json.load(sys.stdin)])'); "
               f"do .venv/bin/simcluster export-logs --name $c {GUEST_LOG_ROOT}/export-$c; done",
               timeout=300)
        vm.collect_logs(dest, guest_dirs=[GUEST_LOG_ROOT, "/var/log/slurm"])
        print(f"\nVM logs of the {vm.image.suite} guest: {dest}")


def pytest_terminal_summary(terminalreporter):
    if not _TIMINGS:
        return
    terminalreporter.section("VM timings (seconds)")
    for suite, t in sorted(_TIMINGS.items()):
        terminalreporter.write_line(f"{suite}: " + ", ".join(f"{k} {v}" for k, v in t.items()))
        try:
            root = cache_root()
            root.mkdir(parents=True, exist_ok=True)
            (root / f"timings-{suite}.json").write_text(json.dumps(t, indent=1) + "\n")
        except OSError:
            pass
