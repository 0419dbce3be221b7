"""Deploy a cluster: check inputs, build variables, run the playbook, summarize."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from provisioner.deploy.extravars import build_extravars, deploy_dir
from provisioner.deploy.inventory import load_inventory
from provisioner.deploy.playbook import DeployResult, run_playbook
from provisioner.deploy.preflight import HIDDEN_SSH_REASON, check_reachable, ssh_reason
from provisioner.deploy.wheelhouse import TRAINING_REQUIREMENTS, fill_wheelhouse
from provisioner.errors import SimclusterError


class DeployError(SimclusterError):
    """The playbook failed on some host (exit 1); names the host, the task and the error."""


@dataclass
class Summary:
    name: str
    result: DeployResult
    seconds: float
    check: bool

    def line(self) -> str:
        hosts = len(self.result.hosts)
        what = "would change" if self.check else "changed"
        changes = f"{self.result.changed} {what}" if self.result.changed else \
            ("nothing would change" if self.check else "nothing changed")
        verb = "checked" if self.check else "deployed"
        return f"cluster '{self.name}' {verb} on {hosts} hosts in {self.seconds:.1f}s: {changes}"

    def diff_text(self) -> str:
        """What --check found would change in the files: unified diffs, per file and hosts."""
        return "".join(d.render() for d in self.result.diffs)


def deploy(inventory_path: str, config_path: Optional[str], progress: Callable[[str], None],
           check: bool = False, training: bool = False, insecure_host_keys: bool = False) -> Summary:
    t0 = time.monotonic()
    inventory = load_inventory(inventory_path)
    extravars = build_extravars(config_path, inventory)
    name = extravars["slurm_cluster_name"]
    check_reachable(inventory.hosts)
    if training:
        extravars.update(slurm_training=True, training_wheelhouse=str(fill_wheelhouse(progress)),
                         training_requirements=TRAINING_REQUIREMENTS)
    progress(f"deploying cluster '{name}': controller {inventory.controller.name}, "
             f"compute {', '.join(h.name for h in inventory.compute)}{' (check mode)' if check else ''}")
    # --check shows each file's change (Ansible's --diff); the keys' copies never show theirs (diff: false).
    result = run_playbook(inventory.path, extravars, deploy_dir(name) / "runner", progress, check=check,
                          diff=check, insecure_host_keys=insecure_host_keys)
    if result.failures:
        first = result.failures[0]
        if first.unreachable and any(words in first.error for words in HIDDEN_SSH_REASON):
            # Ansible lost ssh's own message: ask ssh once more, without Ansible.
            host = next((h for h in inventory.hosts if h.name == first.host), None)
            reason = ssh_reason(host) if host else None
            if reason:
                first.error = f"ssh: {reason} (Ansible said: {first.error})"
        rest = "\n".join(f"  - {f.line()}" for f in result.failures[1:])
        raise DeployError(f"deploy {first.line()}", f"artifacts in {deploy_dir(name) / 'runner'}", details=rest)
    if result.rc != 0:
        raise DeployError(f"ansible-playbook exited {result.rc} ({result.status})",
                          f"artifacts in {deploy_dir(name) / 'runner'}", details=result.output_tail)
    return Summary(name, result, time.monotonic() - t0, check)
