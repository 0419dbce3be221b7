"""Run ansible/site.yml through ansible-runner's Python API and report as it goes.

Each task becomes one progress line once every host has answered
(` - munge : Install munge  changed: node1, node2  ok: ctl  (1.4s)`); failures are
collected with host, task and error, and the play recap gives the changed count. With
``diff`` (``deploy --check``), what each changed task would write (Ansible's ``--diff``: the
before and after of a rendered config) is kept as unified diffs, one per file and text, with
the hosts it applies to.
"""

from __future__ import annotations

import difflib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from provisioner.errors import PrerequisiteError
from provisioner.paths import PLAYBOOK_DIR
from provisioner.progress import Progress



@dataclass
class Failure:
    host: str
    task: str
    error: str
    unreachable: bool = False

    def line(self) -> str:
        what = "cannot reach" if self.unreachable else "failed on"
        return f"{what} {self.host} at task '{self.task}': {self.error}"


@dataclass
class DeployResult:
    rc: int
    status: str
    changed: int = 0
    changed_by_host: Dict[str, int] = field(default_factory=dict)
    failures: List[Failure] = field(default_factory=list)
    hosts: List[str] = field(default_factory=list)
    output_tail: str = ""
    diffs: List["FileDiff"] = field(default_factory=list)


@dataclass
class FileDiff:
    """One file's change as unified diff text, and the hosts where it is the same."""
    path: str
    text: str
    hosts: List[str] = field(default_factory=list)

    def render(self) -> str:
        return f"--- {self.path} on {', '.join(sorted(self.hosts))}\n{self.text.rstrip()}\n"


def _diff_text(diff: Dict) -> Optional[Tuple[str, str]]:
    """(path, unified diff) of one of Ansible's diff records; None where nothing differs."""
    if not isinstance(diff, dict):
        return None
    if isinstance(diff.get("prepared"), str) and diff["prepared"].strip():  # made by the module (apt: packages)
        return str(diff.get("before_header") or diff.get("after_header") or "(prepared)"), diff["prepared"]
    before, after = diff.get("before"), diff.get("after")
    if not isinstance(before, str) or not isinstance(after, str) or before == after:
        return None  # no text to show (a directory's mode, a binary file): the task line says it changed
    # before_header is the file on the host; after_header the template's temporary copy, here.
    path = str(diff.get("before_header") or diff.get("after_header") or "?")
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile="before", tofile="after", n=1)
    text = "".join(line if line.endswith("\n") else line + "\n" for line in list(lines)[2:])
    return (path, text) if text else None


def _result_diffs(res: Dict) -> List[Tuple[str, str]]:
    """Every diff of a task's result, its loop items' included."""
    records = []
    for part in [res] + [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("changed")]:
        diff = part.get("diff")
        records += diff if isinstance(diff, list) else [diff]
    return [d for d in (_diff_text(r) for r in records if r) if d]


def _error_text(res: Dict) -> str:
    """The telling part of a failed task's result: its message, or its stderr's first and last line."""
    lines = lambda text: [ln.strip() for ln in str(text or "").strip().splitlines() if ln.strip()]
    msg = lines(res.get("msg"))
    for item in res.get("results") or []:  # a loop: the first item that failed says why
        if isinstance(item, dict) and item.get("failed"):
            label = item.get("_ansible_item_label", item.get("item"))
            return f"{label}: {_error_text(item)}" if isinstance(label, (str, int)) else _error_text(item)
    for key in ("stderr", "module_stderr", "stdout"):
        out = lines(res.get(key))
        if out and (not msg or msg[0] in ("non-zero return code", "MODULE FAILURE") or key == "stderr"):
            text = out[0] if len(out) == 1 else f"{out[0]} ... {out[-1]}"
            return f"{msg[0]}: {text}" if msg and msg[0] not in ("non-zero return code", "MODULE FAILURE") else text
    if msg:
        return msg[0]
    return "failed (no message)"


class EventPrinter:
    """ansible-runner event handler: progress per task and host, failures, changed count."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.task: Optional[str] = None
        self.task_started = 0.0
        self.outcomes: Dict[str, List[str]] = {}
        self.failures: List[Failure] = []
        self.stats: Dict[str, Dict[str, int]] = {}
        self.diffs: List[FileDiff] = []

    def _keep_diffs(self, host: str, res: Dict) -> None:
        for path, text in _result_diffs(res):
            same = next((d for d in self.diffs if d.path == path and d.text == text), None)
            if same is None:
                self.diffs.append(FileDiff(path, text, [host]))
            elif host not in same.hosts:
                same.hosts.append(host)

    def _flush(self) -> None:
        if self.task is None:
            return
        # Tasks skipped everywhere are noise (other group's role, no systemd, ...).
        if self.outcomes and set(self.outcomes) != {"skipped"}:
            parts = [f"{state}: {', '.join(hosts)}" for state, hosts in self.outcomes.items()]
            self.progress(f" - {self.task}  {'  '.join(parts)}  ({time.monotonic() - self.task_started:.1f}s)")
        self.task, self.outcomes = None, {}

    def _note(self, state: str, host: str) -> None:
        hosts = self.outcomes.setdefault(state, [])
        if host not in hosts:
            hosts.append(host)

    def __call__(self, event: Dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {}) or {}
        host = data.get("host") or data.get("remote_addr") or "?"
        if kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            self._flush()
            role = data.get("role")
            name = data.get("task") or data.get("name") or "?"
            self.task = f"{role} : {name}" if role and not name.startswith(f"{role} :") else name
            self.task_started = time.monotonic()
        elif kind == "runner_on_ok":
            if data.get("task_action") in ("include_role", "include_tasks", "ansible.builtin.include_role",
                                           "ansible.builtin.include_tasks"):
                return True  # the included tasks report for themselves
            res = data.get("res", {}) or {}
            self._note("changed" if res.get("changed") else "ok", host)
            if res.get("changed"):
                self._keep_diffs(host, res)
        elif kind == "runner_on_skipped":
            self._note("skipped", host)
        elif kind == "runner_on_failed":
            if data.get("ignore_errors"):
                self._note("failed (ignored)", host)
            else:
                self._note("FAILED", host)
                self.failures.append(Failure(host, self.task or data.get("task", "?"), _error_text(data.get("res", {}))))
        elif kind == "runner_on_unreachable":
            self._note("UNREACHABLE", host)
            self.failures.append(Failure(host, self.task or data.get("task", "?"),
                                         _error_text(data.get("res", {})), unreachable=True))
        elif kind == "playbook_on_stats":
            self._flush()
            self.stats = {k: dict(data.get(k) or {}) for k in ("changed", "ok", "failures", "dark", "skipped")}
        return True


def run_playbook(inventory: Path, extravars: Dict, private_dir: Path, progress: Progress,
                 check: bool = False, diff: bool = False, tags: Optional[List[str]] = None,
                 insecure_host_keys: bool = False,
                 playbook_dir: Path = PLAYBOOK_DIR) -> DeployResult:
    """Run site.yml against ``inventory``; artifacts of the last runs stay in ``private_dir``."""
    try:
        # lazy: ansible-runner is an optional dependency (the deploy extra); a clear error where it is missing
        import ansible_runner
    except ImportError:
        raise PrerequisiteError("simcluster deploy needs ansible-runner and ansible-core",
                                "pip install 'simcluster[deploy]'") from None
    private_dir.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)  # ansible-playbook lives beside this Python
    envvars = {
        "ANSIBLE_CONFIG": str(playbook_dir / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(playbook_dir / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(playbook_dir / "filter_plugins"),
        "ANSIBLE_HOST_KEY_CHECKING": "False" if insecure_host_keys else "True",
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_NOCOLOR": "1",
    }
    cmdline = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    if tags:
        cmdline += ["--tags", ",".join(tags)]
    # ansible-runner looks ansible-playbook up on this process's PATH.
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = envvars["PATH"]
    # ansible-runner keeps a run's command line in env/cmdline and reads it back in a run that
    # gives none: the deploy after a `deploy --check` ran in check mode ("deployed", nothing done).
    (private_dir / "env" / "cmdline").unlink(missing_ok=True)
    printer = EventPrinter(progress)
    r = ansible_runner.run(private_data_dir=str(private_dir), project_dir=str(playbook_dir),
                           playbook="site.yml", inventory=str(inventory), extravars=extravars,
                           envvars=envvars, cmdline=" ".join(cmdline) or None, event_handler=printer,
                           quiet=True, rotate_artifacts=3)
    stats = printer.stats
    changed_by_host = stats.get("changed", {})
    hosts = sorted(set().union(*[set(v) for v in stats.values()])) if stats else []
    tail = ""
    if r.rc != 0 and not printer.failures:
        try:
            tail = "\n".join(r.stdout.read().strip().splitlines()[-15:])
        except Exception:  # noqa: BLE001 - stdout may be gone; the rc still tells
            tail = ""
    return DeployResult(rc=r.rc, status=r.status, changed=sum(changed_by_host.values()),
                        changed_by_host=changed_by_host, failures=printer.failures, hosts=hosts,
                        output_tail=tail, diffs=printer.diffs)
