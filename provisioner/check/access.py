"""--account, --qos and --licenses against the cluster: the accounting database first
(slurmctld looks the association up before the partition), then the partition's
Allow*/Deny* lists, then the QoS an account may use; Licenses= for -L."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from provisioner.check.asks import INVALID_ACCOUNT, INVALID_LICENSES, INVALID_QOS, conf_value, names_of
from provisioner.check.judge import Judge, enforce_accounting
from provisioner.check.rules.core import ERROR, WARNING
from provisioner.check.script import HeaderOpt
from provisioner.config.types import PartitionSpec


@dataclass(frozen=True)
class _Listed:
    """What a partition's Allow*/Deny* list (accounts or QoS) is judged with."""

    option: str  # the sbatch option: "account"
    noun: str  # in messages: "accounts"
    key: str  # the partition's keys: Allow<key>, Deny<key>
    rule: str
    refused: str  # sbatch's error
    held: str  # the reason a held job shows
    slurm_noun: str  # as slurmctld's message names it
    without: str  # what a job without the option gets
    unless: str  # ... which must be one of the allowed
    default_ok: Callable[[List[str]], bool]  # the default passes the Allow list without the option


ACCOUNTS = _Listed("account", "accounts", "Accounts", "cluster.account", INVALID_ACCOUNT, "AccountNotAllowed",
                   "account", "the job runs under your default account", "that", lambda allow: False)
QOS = _Listed("qos", "QoS", "Qos", "cluster.qos", INVALID_QOS, "QOSNotAllowed", "QOS",
              "the job gets your default QoS (normal unless your association sets another)", "your default",
              lambda allow: "normal" in allow)


def _judge_partition_list(j: Judge, part: PartitionSpec, listed: _Listed, opt: Optional[HeaderOpt],
                          value: Optional[str]) -> bool:
    """--account / --qos (``value``, lower case; None when not given) against the partition's
    Allow*/Deny* list; True when it reported something."""
    name = part.name
    allow = names_of(part.option(f"Allow{listed.key}"))
    deny = names_of(part.option(f"Deny{listed.key}"))
    if allow is not None:
        allowed = f"partition {name} allows {listed.noun} {', '.join(allow)}"
        if value is None:
            if not listed.default_ok(allow):
                j.add(None, WARNING, listed.rule,
                      f"no --{listed.option}: {listed.without}, and partition {name} allows only {', '.join(allow)}: "
                      f"unless {listed.unless} is one of them, " + j.held_or_refused(listed.refused, listed.held),
                      allowed, insert=f"#SBATCH --{listed.option}={allow[0]}")
            return True
        if value not in allow:
            j.add(opt, ERROR, listed.rule,
                  f"--{listed.option}={opt.value}: {allowed} (Allow{listed.key}): " + j.held_or_refused(
                      listed.refused, f"\"Job's {listed.slurm_noun} not permitted to use this partition ({name} "
                      f"allows {','.join(allow)} not {value})\""), allowed, allow[0])
            return True
    elif deny is not None and value is not None and value in deny:
        j.add(opt, ERROR, listed.rule,
              f"--{listed.option}={opt.value}: partition {name} denies {listed.noun} {', '.join(deny)} "
              f"(Deny{listed.key}): " + j.held_or_refused(
                  listed.refused, f"\"Job's {listed.slurm_noun} not permitted to use this partition ({name} denies "
                  f"{','.join(deny)} including {value})\""),
              f"partition {name} denies {listed.noun} {', '.join(deny)}")
        return True
    return False


def judge_account(j: Judge, part: PartitionSpec) -> None:
    """-A against the accounting database first (slurmctld looks the association up before it
    looks at the partition), then against the partition's AllowAccounts / DenyAccounts."""
    ask, spec, name = j.ask, j.spec, part.name
    acct = ask.account.value.strip().lower() if ask.account else None
    allow = names_of(part.option("AllowAccounts"))
    enforce = enforce_accounting(spec)
    known = {a.name.lower() for a in spec.accounts}
    if acct is not None and spec.accounting and known and acct not in known | {"root", "simcluster"}:
        accounts = f"accounts: {', '.join(sorted(known))}"
        if "associations" in enforce:
            j.add(ask.account, ERROR, "cluster.account",
                  f"--account={ask.account.value}: no such account in this cluster's accounting database, and "
                  f"AccountingStorageEnforce={conf_value(spec, 'AccountingStorageEnforce')} refuses it: "
                  f"\"{INVALID_ACCOUNT}\"", accounts, (allow or sorted(known))[0])
        else:
            j.add(ask.account, WARNING, "cluster.account",
                  f"--account={ask.account.value}: no such account in this cluster's accounting database: without "
                  "associations in AccountingStorageEnforce Slurm runs the job under your default account instead"
                  + (f", and partition {name} allows only {', '.join(allow)}" if allow else ""),
                  accounts, (allow or sorted(known))[0])
        return
    _judge_partition_list(j, part, ACCOUNTS, ask.account, acct)


def judge_licenses(j: Judge) -> None:
    """-L/--licenses against the cluster's Licenses= (name:count, counts added up)."""
    opt = j.script.opt("licenses")
    if opt is None:
        return
    have: Dict[str, int] = {}
    for item in (conf_value(j.spec, "Licenses") or "").split(","):
        name, _, count = item.strip().partition(":")
        if name:
            have[name.lower()] = int(count) if count.isdigit() else 1
    offer = f"licenses here: {', '.join(f'{k}:{v}' for k, v in have.items()) or 'none'} (Licenses=)"
    for item in re.split(r"[,|]", opt.value.strip("'\"")):
        name, _, count = item.strip().partition(":")
        want = int(count) if count.isdigit() else 1
        if name and (name.lower() not in have or want > have[name.lower()]):
            what = (f"this cluster has no license {name}" if name.lower() not in have
                    else f"{want} {name} licenses asked, the cluster has {have[name.lower()]}")
            j.add(opt, ERROR, "cluster.license",
                  f"--licenses={opt.value}: {what}: sbatch refuses the job: \"{INVALID_LICENSES}\"", offer)
            return


def judge_qos(j: Judge, part: PartitionSpec) -> None:
    """--qos against the accounting database, the partition's AllowQos / DenyQos, then the
    QoS the job's account may use."""
    ask, spec = j.ask, j.spec
    qos = ask.qos.value.strip().lower() if ask.qos else None
    enforce = enforce_accounting(spec)
    defined = {q.name.lower() for q in spec.qos} | {"normal"}
    if qos is not None and spec.accounting and qos not in defined:
        if "qos" in enforce:
            j.add(ask.qos, ERROR, "cluster.qos",
                  f"--qos={ask.qos.value}: no such QoS in this cluster's accounting database: sbatch refuses the "
                  f"job: \"{INVALID_QOS}\" (AccountingStorageEnforce={conf_value(spec, 'AccountingStorageEnforce')})",
                  f"QoS here: {', '.join(sorted(defined))}", sorted(defined)[0])
        else:
            j.add(ask.qos, WARNING, "cluster.qos",
                  f"--qos={ask.qos.value}: no such QoS in this cluster's accounting database: without qos in "
                  "AccountingStorageEnforce Slurm takes the job and gives it no QoS (its priority, limits and "
                  "preemption do not apply)", f"QoS here: {', '.join(sorted(defined))}", sorted(defined)[0])
        return
    if _judge_partition_list(j, part, QOS, ask.qos, qos):
        return
    acct = ask.account.value.strip().lower() if ask.account else None
    if qos is not None and "qos" in enforce and acct is not None:
        for a in spec.accounts:
            if a.name.lower() == acct and a.qos and qos not in {x.lower() for x in a.qos}:
                j.add(ask.qos, ERROR, "cluster.qos",
                      f"--qos={ask.qos.value}: account {a.name} may use QoS {', '.join(a.qos)} only: sbatch refuses "
                      f"the job: \"{INVALID_QOS}\"", f"account {a.name} may use QoS {', '.join(a.qos)}", a.qos[0])
