"""pytest plugin (entry point `simcluster`, loaded automatically once simcluster is installed).

Fixtures: ``slurm_cluster`` (a running cluster, one per session and spec, reused),
``slurm_cluster_factory`` (more clusters, taken down when the test ends) and
``slurm_faults`` (`simcluster fault` for the test, healed at teardown). The
``@pytest.mark.slurm(nodes=..., gpus=..., ...)`` marker overrides the session's options for
one test. A failed test gets the export-logs bundle of every cluster it used, its path in
the report. Nothing stays running: the session takes down what it made (Ctrl-C included)
and takes down leftovers of sessions that were killed (see provisioner/testing/owners.py).

Nothing here runs unless a test asks for a fixture: importing the plugin adds options and
a marker only; simcluster's own modules load on first use.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

_OPTIONS = (  # (name, help, is a flag); each is also an ini key simcluster_<name>
    ("nodes", "number of virtual nodes (default 2)", False),
    ("gpus", "GPUs as up takes them: ids '6,7', or 'fake:K' for --fake-gpus K ('fake:6,7': those ids, simulated)",
     False),
    ("backend", "local (default) or docker", False),
    ("slurm", "Slurm version of the cluster (as up --slurm)", False),
    ("accounting", "add slurmdbd + MariaDB (sacct)", True),
    ("keep", "leave the clusters running after the session (names printed at the end)", True),
    ("existing", "NAME: unmarked tests use this running cluster instead of making one", False),
    ("logs-dir", "where export-logs bundles of failed tests go (default: <rootdir>/simcluster-logs)", False),
)
_POOL = pytest.StashKey()
_USED = pytest.StashKey()
_EXPORTED = pytest.StashKey()
_PROPERTY = "simcluster_logs"


def pytest_addoption(parser):
    group = parser.getgroup("simcluster", "simcluster: real Slurm clusters for tests")
    for name, help_text, flag in _OPTIONS:
        kwargs = dict(action="store_true", default=None) if flag else dict(default=None, metavar="VALUE")
        group.addoption(f"--simcluster-{name}", dest=f"simcluster_{name.replace('-', '_')}", help=help_text, **kwargs)
        parser.addini(f"simcluster_{name.replace('-', '_')}", help_text, type="bool" if flag else "string",
                      default=None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm(nodes=2, gpus=None, backend='local', slurm=None, accounting=False, fast_failure=False, "
                   "cpus=None, memory=None, config=None): the slurm_cluster fixture gives this test a cluster of "
                   "this spec (made or reused); keys not given come from the --simcluster-* options")
    config.pluginmanager.register(_Summary(config), "simcluster-summary")


def _option(config, name: str):
    key = f"simcluster_{name.replace('-', '_')}"
    value = config.getoption(key)
    if value is None:
        value = config.getini(key)
    return value if value not in ("", None) else None


def _pool(config):
    if _POOL not in config.stash:
        # lazy: pytest loads this plugin in every session; the cluster model loads only when a fixture is used
        from provisioner.testing.pool import ClusterPool, stderr_progress
        config.stash[_POOL] = ClusterPool(keep=bool(_option(config, "keep")), progress=stderr_progress)
    return config.stash[_POOL]


def session_request(config) -> Dict[str, Any]:
    """The cluster the --simcluster-* options (or ini keys) describe."""
    req: Dict[str, Any] = {}
    for key in ("nodes", "gpus", "backend", "slurm", "accounting"):
        value = _option(config, key)
        if value is not None:
            req[key] = value
    return req


def pytest_sessionstart(session):
    """Take down clusters of earlier sessions that died without doing so themselves."""
    # lazy: pytest loads this plugin in every session; the cluster model loads only when a fixture is used
    from provisioner.testing import owners
    if owners.registry_dir().is_dir():
        owners.sweep(lambda line: print(f"simcluster: {line}", flush=True))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    _close(session.config)


def pytest_unconfigure(config):
    _close(config)  # a session that never reached sessionfinish


def _close(config) -> None:
    # lazy: pytest loads this plugin in every session; the cluster model loads only when a fixture is used
    from provisioner.testing import owners
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        errors = pool.close()
        if errors:
            print(f"simcluster: clusters that would not go down: {'; '.join(errors)}", flush=True)
    # The xdist controller ends after its workers: a worker that crashed left its clusters.
    if not hasattr(config, "workerinput") and owners.registry_dir().is_dir():
        owners.sweep(lambda line: print(f"simcluster: {line}", flush=True))


def _use(request, make) -> Any:
    """Run ``make`` (a pool call) as a fixture would: skip or fail with one clear line."""
    # lazy: pytest loads this plugin in every session; the cluster model loads only when a fixture is used
    from provisioner.testing.pool import BadRequest, CannotRun
    skip = fail = None
    try:
        handle = make()
    except CannotRun as exc:
        skip = str(exc)
    except BadRequest as exc:
        fail = str(exc)
    # Outside the except blocks: the report shows the one line, not a chained traceback.
    if skip is not None:
        pytest.skip(skip)
    if fail is not None:
        pytest.fail(fail, pytrace=False)
    request.node.stash.setdefault(_USED, []).append(handle)
    return handle


@pytest.fixture
def slurm_cluster(request):
    """A running Slurm cluster (SlurmCluster: name, nodes, env, run, sbatch, logs_dir).

    Made once per session and spec and reused; @pytest.mark.slurm(...) on the test picks
    another spec; --simcluster-existing NAME attaches unmarked tests to a running cluster."""
    pool = _pool(request.config)
    marker = request.node.get_closest_marker("slurm")
    if marker is not None and marker.args:
        pytest.fail("@pytest.mark.slurm takes keyword arguments only, e.g. @pytest.mark.slurm(nodes=3)", pytrace=False)
    existing = _option(request.config, "existing")
    if existing and marker is None:
        return _use(request, lambda: pool.attach(existing))
    req = session_request(request.config)
    req.update(marker.kwargs if marker is not None else {})
    return _use(request, lambda: pool.shared(req))


@pytest.fixture
def slurm_cluster_factory(request):
    """make(**keys) -> a new SlurmCluster (keys as the slurm marker's, over the session's
    options); every cluster it made is taken down when the test ends."""
    pool = _pool(request.config)
    made: List[Any] = []

    def make(**keys):
        req = session_request(request.config)
        req.update(keys)
        handle = _use(request, lambda: pool.make(req))
        made.append(handle)
        return handle

    yield make
    for handle in reversed(made):
        pool.release(handle)


@pytest.fixture
def slurm_faults(request):
    """SlurmFaults over `simcluster fault` for this test's slurm_cluster (or cluster=...):
    kill, pause, resume, drain, kill_controller, stop_accounting, heal; all healed at teardown;
    and a job's time_limit(job, seconds) and preempt(job, mode=None)."""
    # lazy: pytest loads this plugin in every session; the cluster model loads only when a fixture is used
    from provisioner.testing.faults import SlurmFaults

    class _Lazy(SlurmFaults):
        # slurm_cluster only when a call names no cluster: a test that breaks only factory
        # clusters makes no session cluster.
        def _inj(self, cluster=None):
            if cluster is None and self.default is None:
                self.default = request.getfixturevalue("slurm_cluster")
            return super()._inj(cluster)

    faults = _Lazy(None)
    yield faults
    faults.heal_all()


def _bundle_dir(config, nodeid: str, cluster: str) -> Path:
    root = _option(config, "logs-dir")
    base = Path(root) if root else config.rootpath / "simcluster-logs"
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]
    return base.resolve() / safe / cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    used = item.stash.get(_USED, [])
    if not rep.failed or not used:
        return
    done = item.stash.setdefault(_EXPORTED, set())
    lines = []
    for handle in used:
        if handle.name in done:
            continue
        done.add(handle.name)
        dest = _bundle_dir(item.config, item.nodeid, handle.name)
        try:
            handle.export_logs(dest)
        except Exception as exc:  # a cluster already gone: say so, the failure itself matters more
            lines.append(f"could not export the logs of cluster '{handle.name}': {exc}")
            continue
        lines.append(f"export-logs bundle of cluster '{handle.name}' ({handle.backend}): {dest}")
        rep.user_properties.append((_PROPERTY, str(dest)))
    if lines:
        rep.sections.append(("simcluster logs", "\n".join(lines)))


class _Summary:
    """The end-of-run lines: bundles of failed tests, clusters kept."""

    def __init__(self, config):
        self.config = config
        self.bundles: Dict[str, None] = {}

    def pytest_runtest_logreport(self, report):
        # From the report (not makereport): the xdist controller sees its workers' bundles too.
        for key, value in getattr(report, "user_properties", ()):
            if key == _PROPERTY:
                self.bundles[f"{report.nodeid}: {value}"] = None

    def pytest_terminal_summary(self, terminalreporter):
        if self.bundles:
            terminalreporter.write_sep("-", "simcluster: export-logs bundles of failed tests")
            for line in self.bundles:
                terminalreporter.write_line(line)
        pool = self.config.stash.get(_POOL, None)
        kept = [h.name for h in pool.owned] + pool.kept if pool is not None and pool.keep else []
        if kept:
            terminalreporter.write_sep("-", "simcluster: clusters kept (--simcluster-keep)")
            for name in kept:
                terminalreporter.write_line(f"{name}: take it down with 'simcluster down --name {name}'")
