"""SchedMD's own Python testsuite (ATF, testsuite/python in Slurm's source) against a cluster.

`make setup-atf` (scripts/setup-atf.sh) fetches the testsuite of exactly the host's Slurm
release from Debian's source package. This module brings up a cluster of its own and runs
ATF in its local-config mode against it: ATF then uses the running cluster as it is,
never restarts a daemon or rewrites slurm.conf, and skips by itself every test that wants
another configuration (auto-config) or more than the cluster has.

ATF runs under its own pytest (Debian's pytest-3: ATF 22.05 imports `py.io`, which the
venv's newer pytest no longer has), one subprocess per test module, each with a time limit
and every job cancelled between modules, so one module cannot starve the next. Each
module writes a JUnit file; every test's outcome is read from those.

The assertion: every failing test is in EXPECTED_FAILURES with the reason it fails on any
Debian-packaged cluster, and nothing else fails. The table is strict: an entry that no
longer fails (a Debian update, a fix here) fails this test too, so the table stays exact.
docs/schedmd-testsuite.md describes the run, the cluster and the table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.conftest import REPO, module_cluster

pytestmark = pytest.mark.integration

NAME = "atf1"
# The release the table below was made for (Debian bookworm's slurm-wlm).
RELEASE = "22.05.8"
# Enough for every local-config test that counts nodes (ATF asks for at most 4 but one
# stress test that asks for 128) and CPUs (one asks for 4 on a node); slurmdbd for the
# tests that read accounting (sacct, sprio, hetjob, --exclusive), as production has it.
CLUSTER_ARGS = ("--nodes", "4", "--cpus", "4", "--accounting")
# A module that runs longer than this is stopped and counted as failing.
MODULE_TIMEOUT_S = 300
# Left out, to keep `make test` within its time (docs/schedmd-testsuite.md): test id -> why.
DESELECTED: Dict[str, str] = {
    "tests/commands/srun/test_--no-allocate.py::test_multiple_jobs":
        "100 rounds of three `srun --no-allocate` steps (a slurmd race stress test; --no-allocate "
        "is for root and SlurmUser only): 147 s of a 330-s run. It passes here given sudo and a "
        "sudo that keeps SLURM_CONF",
}

_VERSION = "Debian's version string: `--version` prints 'slurm-wlm 22.05.8', ATF expects 'slurm 22.05.8'"
_ROUTE = ("compiles test_plugin.c against Slurm's built source tree (config.h, src/common); "
          "a source package unpacked without ./configure and make has neither")
_ROUTE_ID = "tests/parameters/slurm/RoutePlugin/topology/test_plugin.py::test_route_topology"
_RESTD = ("slurmrestd refuses root ('fatal: slurmrestd should not be run as the root user') and "
          "`make test` runs ATF as root; the tests that only print or reject do not start it as a server")

# Test id (ATF path::test name, parametrisation dropped) -> why it fails on any cluster
# made of Debian's packages, not only on ours.
EXPECTED_FAILURES: Dict[str, str] = {
    "tests/commands/scontrol/test_--version.py::test_version": _VERSION,
    "tests/commands/sprio/test_--version.py::test_version": _VERSION,
    "tests/commands/srun/test_--version.py::test_version": _VERSION,
    "tests/commands/sstat/test_--version.py::test_version": _VERSION,
    "tests/commands/sgather/test_--usage.py::test_usage":
        "sgather is not shipped by Debian (no package has /usr/bin/sgather)",
    _ROUTE_ID: _ROUTE,
    "tests/commands/slurmrestd/test_options.py::test_a": _RESTD,
    "tests/commands/slurmrestd/test_options.py::test_s": _RESTD,
    "tests/commands/slurmrestd/test_options.py::test_get_a_rest_auth": _RESTD,
}

# Failures of ours, being fixed: allowed to fail (or pass) for now, never part of the strict
# table; each moves out once fixed, and must then pass. docs/schedmd-testsuite.md.
PENDING: Dict[str, str] = {}


def atf_dir() -> Path:
    """testsuite/python of the host's release, where `make setup-atf` put it."""
    where = subprocess.run(["bash", str(REPO / "scripts" / "setup-atf.sh"), "--print-dir"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if where.returncode != 0:
        pytest.skip(where.stderr.strip() or "scripts/setup-atf.sh --print-dir failed")
    return Path(where.stdout.strip()) / "python"


def host_release() -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "slurm-client"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    return re.sub(r"^\d+:", "", out).split("-")[0]


def atf_modules(root: Path) -> List[str]:
    """Every ATF test module, as a path relative to testsuite/python, in a stable order."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py"))


def atf_test_id(module: str, name: str) -> str:
    """MODULE::NAME, a parametrised test's ``[...]`` dropped (the table lists tests, not cases)."""
    return f"{module}::" + re.sub(r"\[.*\]$", "", name)


def outcomes_of(junit: Path, module: str) -> List[Tuple[str, str, str]]:
    """(test id, outcome, message) for each test case of one module's JUnit file; a module
    that could not be imported is one case, ``MODULE::<collect>``."""
    found = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        if not case.get("classname"):  # a collection error: pytest names the module
            name = "<collect>"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = (el.get("message") or el.text or "").strip().splitlines()[0:1]
                message = message[0][:300] if message else ""
                break
        found.append((atf_test_id(module, name), outcome, message))
    return found


def cancel_every_job(cluster) -> None:
    """Cancel every job of the cluster and wait until none is left (COMPLETING included)."""
    user = os.environ.get("USER") or subprocess.run(["id", "-un"], stdout=subprocess.PIPE, text=True).stdout.strip()
    cluster.run(["scancel", "-u", user], check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not cluster.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError("jobs still queued a minute after scancel: "
                         + cluster.run(["squeue"], check=False).stdout)


@pytest.fixture(scope="module")
def atf_root() -> Path:
    if host_release() != RELEASE:
        pytest.skip(f"EXPECTED_FAILURES is for Slurm {RELEASE} (Debian bookworm); this host has "
                    f"{host_release() or 'no Slurm'}: run the testsuite by hand (docs/schedmd-testsuite.md)")
    root = atf_dir()
    if not (root / "lib" / "atf.py").is_file():
        pytest.skip(f"SchedMD's testsuite is not in {root}: make setup-atf")
    if shutil.which("pytest-3") is None:
        pytest.skip("no pytest-3 (Debian's python3-pytest): make setup-atf")
    return root


def test_schedmd_testsuite_local_config(atf_root, tmp_path):
    conf = tmp_path / "testsuite.conf"
    # SlurmConfigDir is overridden by SLURM_CONF; the source and build dirs point at the
    # unpacked testsuite, which is all of Slurm's source ATF gets (see _ROUTE).
    conf.write_text(f"SlurmSourceDir={atf_root.parents[1]}\nSlurmBuildDir={atf_root.parents[1]}\n"
                    "SlurmInstallDir=/usr\nSlurmConfigDir=/etc/slurm\n")
    results: List[Tuple[str, str, str]] = []
    timings: List[Tuple[float, str]] = []
    with module_cluster(NAME, *CLUSTER_ARGS) as cluster:
        env = cluster.env()
        env["SLURM_TESTSUITE_CONF"] = str(conf)
        env.pop("PYTHONPATH", None)  # ATF's own pytest must not see this checkout's
        for module in atf_modules(atf_root):
            junit = tmp_path / (re.sub(r"\W", "_", module) + ".xml")
            started = time.monotonic()
            try:
                proc = subprocess.run(
                    ["pytest-3", "-p", "no:cacheprovider", "-q", "--local-config",
                     f"--basetemp={tmp_path / 'atf-tmp'}", f"--junitxml={junit}", module]
                    + [f"--deselect={tid}" for tid in DESELECTED if tid.startswith(module + "::")],
                    cwd=atf_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True, timeout=MODULE_TIMEOUT_S)
                if junit.exists():
                    results += outcomes_of(junit, module)
                else:
                    results.append((f"{module}::<module>", "failed", f"pytest-3 exited {proc.returncode}: "
                                    + proc.stdout[-300:]))
            except subprocess.TimeoutExpired:
                results.append((f"{module}::<module>", "failed", f"ran over {MODULE_TIMEOUT_S} s"))
            timings.append((time.monotonic() - started, module))
            cancel_every_job(cluster)

    counts = {k: sum(1 for _, o, _ in results if o == k) for k in ("passed", "failed", "skipped")}
    failed = {tid: msg for tid, o, msg in results if o == "failed"}
    outcome = {tid: o for tid, o, _ in results}
    print(f"\nSchedMD testsuite {RELEASE}, local-config, {len(timings)} modules in "
          f"{sum(t for t, _ in timings):.0f} s: {counts}")
    for t, module in sorted(timings, reverse=True)[:5]:
        print(f"  {t:6.1f} s  {module}")
    for tid in sorted(PENDING):
        print(f"  pending: {tid}: {outcome.get(tid, 'not run')}")

    unexpected = {tid: msg for tid, msg in failed.items()
                  if tid not in EXPECTED_FAILURES and tid not in PENDING}
    stale = {tid: outcome.get(tid, "not run") for tid in EXPECTED_FAILURES if tid not in failed}
    assert not unexpected, "ATF tests failed that fail on no Debian-packaged cluster:\n" + "\n".join(
        f"  {tid}: {msg}" for tid, msg in sorted(unexpected.items()))
    assert not stale, ("listed in EXPECTED_FAILURES but did not fail (remove them from the table):\n"
                       + "\n".join(f"  {tid}: {o}" for tid, o in sorted(stale.items())))
    assert counts["passed"] > 0


def test_junit_outcomes_read_as_pytest_writes_them(tmp_path):
    """The outcome reader on a JUnit file of the shape pytest-3 writes: a pass, a failure, a
    skip, a parametrised error, and a module that could not be imported."""
    junit = tmp_path / "m.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.commands.x.test_a" name="test_ok" time="0.1"/>'
        '<testcase classname="tests.commands.x.test_a" name="test_bad"><failure message="AssertionError: 1 == 0">'
        'long text</failure></testcase>'
        '<testcase classname="tests.commands.x.test_a" name="test_later"><skipped type="pytest.skip" '
        'message="This test requires auto-config to be enabled"/></testcase>'
        '<testcase classname="tests.commands.x.test_a" name="test_p[3]"><error message="failed on setup"/></testcase>'
        '<testcase classname="" name="tests.commands.x.test_b"><error message="collection failure">'
        'ImportError</error></testcase>'
        '</testsuite></testsuites>')
    module = "tests/commands/x/test_a.py"
    assert outcomes_of(junit, module) == [
        (f"{module}::test_ok", "passed", ""),
        (f"{module}::test_bad", "failed", "AssertionError: 1 == 0"),
        (f"{module}::test_later", "skipped", "This test requires auto-config to be enabled"),
        (f"{module}::test_p", "failed", "failed on setup"),
        (f"{module}::<collect>", "failed", "collection failure"),
    ]
    assert set(EXPECTED_FAILURES).isdisjoint(PENDING)
    assert set(EXPECTED_FAILURES).isdisjoint(DESELECTED)
