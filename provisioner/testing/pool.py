"""The clusters of one pytest session: made on first request, reused per request, taken down at the end.

A request is a small dict of `up`'s choices (nodes, gpus, backend, slurm, accounting, ...),
turned into a spec by the same builder as `up`'s flags (config/overrides.py). The session
makes one cluster per distinct request (named pyt-<token>-<n>, the token random per
session; ports picked free by the provider) and hands the same one to every test that
asks for that request; a factory's cluster is taken down when its test ends; with keep,
nothing is taken down and the names are reported. When the machine cannot make a cluster
(no docker engine, no Slurm binaries, GPUs missing) the request is answered with a skip
reason, and a failed `up` with an error, once per request, without trying again.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Dict, List, Optional, Tuple

from provisioner import providers
from provisioner import named_clusters
from provisioner.config import load_spec
from provisioner.config.overrides import spec_overrides
from provisioner.errors import ClusterNotFound, SimclusterError
from provisioner.progress import stderr as progress_stderr
from provisioner.testing import owners
from provisioner.testing.handle import SlurmCluster

# The marker's keys and the options behind them; all optional.
REQUEST_KEYS = ("nodes", "gpus", "backend", "slurm", "accounting", "fast_failure", "cpus", "memory", "config")


class CannotRun(Exception):
    """This machine cannot make the requested cluster: the test is skipped with this reason."""


class BadRequest(Exception):
    """The request is wrong (unknown key, invalid spec) or `up` failed: the test errors with this message."""


def gpu_choices(value: Any) -> Dict[str, Any]:
    """--simcluster-gpus / gpus= as `up`'s choices: '6,7' (real ids, as up --gpus), 'fake:K'
    (up --fake-gpus K) or 'fake:6,7' (the ids 6,7 simulated); None, '' and 'none': no GPUs."""
    if value in (None, "", "none"):
        return {}
    text = str(value).strip()
    if text.startswith("fake:"):
        rest = text[5:]
        if rest.isdecimal():
            return {"fake_gpus": int(rest)}
        return {"gpus": rest, "fake_gpus": True}
    return {"gpus": text}


def describe(request: Dict[str, Any]) -> str:
    """'2 nodes, local, gpus fake:2' for messages."""
    nodes = request.get("nodes")
    parts = [f"{2 if nodes in (None, '') else nodes} nodes", request.get("backend") or "local"]
    parts += [f"{k} {v}" for k, v in sorted(request.items()) if k not in ("nodes", "backend") and v not in (None, False)]
    return ", ".join(parts)


def build_spec(name: str, request: Dict[str, Any]):
    """The ClusterSpec of ``request`` (validated as `up` would); BadRequest/CannotRun otherwise."""
    unknown = sorted(set(request) - set(REQUEST_KEYS))
    if unknown:
        raise BadRequest(f"unknown slurm marker key(s) {', '.join(unknown)} (allowed: {', '.join(REQUEST_KEYS)})")
    try:
        overrides = spec_overrides(name=name, nodes=request.get("nodes"), backend=request.get("backend"),
                                   cpus=request.get("cpus"), memory=request.get("memory"),
                                   accounting=request.get("accounting"), fast_failure=request.get("fast_failure"),
                                   slurm=request.get("slurm") or None, **gpu_choices(request.get("gpus")))
        return load_spec(request.get("config"), overrides)
    except SimclusterError as exc:
        raise BadRequest(f"simcluster cannot make a cluster of {describe(request)}: {exc.one_line()}"
                         + (f"\n{exc.details}" if exc.details else "")) from None


class ClusterPool:
    """The clusters this session made or attached to."""

    def __init__(self, keep: bool = False, progress: Callable[[str], None] = lambda line: None):
        self.token = secrets.token_hex(3)
        self.keep = keep
        self.progress = progress
        self._seq = 0
        self._shared: Dict[Tuple, SlurmCluster] = {}
        self._cannot: Dict[Tuple, str] = {}
        self._failed: Dict[Tuple, str] = {}
        self.owned: List[SlurmCluster] = []
        self.kept: List[str] = []
        self.attached: Dict[str, SlurmCluster] = {}

    @staticmethod
    def key(request: Dict[str, Any]) -> Tuple:
        return tuple(sorted((k, str(v)) for k, v in request.items() if v not in (None, False, "")))

    def new_name(self) -> str:
        self._seq += 1
        return f"{owners.PREFIX}{self.token}-{self._seq}"

    def shared(self, request: Dict[str, Any]) -> SlurmCluster:
        """The session's cluster for ``request`` (made on first use)."""
        key = self.key(request)
        if key in self._failed:  # one failed `up` per spec, not one per test
            raise BadRequest(f"{self._failed[key]} (earlier in this session)")
        if key not in self._shared:
            try:
                self._shared[key] = self.make(request)
            except BadRequest as exc:
                self._failed[key] = str(exc)
                raise
        return self._shared[key]

    def make(self, request: Dict[str, Any]) -> SlurmCluster:
        """A new cluster of ``request``, owned by this session."""
        key = self.key(request)
        if key in self._cannot:
            raise CannotRun(self._cannot[key])
        name = self.new_name()
        spec = build_spec(name, request)
        provider = providers.provider_named(spec.backend)
        try:
            provider.sanity_checks(spec)
        except SimclusterError as exc:
            self._cannot[key] = f"this machine cannot run a simcluster cluster of {describe(request)}: {exc.one_line()}"
            raise CannotRun(self._cannot[key]) from None
        owners.record(name)  # before anything exists: a session killed during `up` is swept too
        try:
            self.progress(named_clusters.up(spec, provider, progress=self.progress).splitlines()[0])
        except SimclusterError as exc:
            owners.forget(name)  # up deleted what it made
            raise BadRequest(f"simcluster up of a cluster of {describe(request)} failed: {exc.one_line()}"
                             + (f"\n{exc.details}" if exc.details else "")) from None
        except BaseException:
            owners.forget(name)
            raise
        handle = SlurmCluster(named_clusters.load(name), owned=True)
        self.owned.append(handle)
        return handle

    def attach(self, name: str) -> SlurmCluster:
        """A running cluster this session did not make (--simcluster-existing); never taken down."""
        if name not in self.attached:
            try:
                self.attached[name] = SlurmCluster(named_clusters.load(name), owned=False)
            except SimclusterError as exc:
                raise BadRequest(f"--simcluster-existing {name}: {exc.one_line()}") from None
        return self.attached[name]

    def release(self, handle: SlurmCluster, quiet: bool = False) -> None:
        """Take down one owned cluster now (factory clusters at the end of their test)."""
        if handle not in self.owned:
            return
        self.owned.remove(handle)
        self._shared = {k: v for k, v in self._shared.items() if v is not handle}
        if self.keep:
            owners.forget(handle.name)
            self.kept.append(handle.name)
            return
        try:
            message = named_clusters.down(handle.name)
            if not quiet:
                self.progress(message)
        except ClusterNotFound:
            pass
        owners.forget(handle.name)

    def close(self) -> List[str]:
        """Take down (or, with keep, leave) every cluster this session made; return the errors."""
        errors = []
        for handle in list(self.owned):
            try:
                self.release(handle, quiet=True)
            except Exception as exc:  # one cluster that will not go down must not keep the others up
                errors.append(f"{handle.name}: {exc}")
        return errors


def stderr_progress(line: str) -> None:
    """up's and down's progress lines: captured with the test that made the cluster."""
    progress_stderr(line)
