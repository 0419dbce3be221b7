"""Every check verify knows, by suite, in the order they are reported."""

from __future__ import annotations

from typing import List, Sequence

from provisioner.errors import UsageError
from provisioner.verify import basic, container, faults, gpu_faults, isolation, rest, signals, training, versions
from provisioner.verify.check_runner import Check

SUITES = ("basic", "signals", "rest", "ddp", "fsdp", "deepspeed", "megatron", "faults")
# Not in "all": the faults suite breaks the cluster on purpose (and heals it), needs a
# cluster made with `up --fast-failure`, and takes 1-2 minutes (verify/faults.py).
# "signals" is apart from "basic" because it waits for slurmctld's time-limit pass, which
# runs every 30 s (not a setting), where the rest of basic takes a few seconds: up to 30 s
# for signals.time-limit, 2-2.5 minutes for signals.checkpoint (a 90 s --signal offset
# needs a 2-minute limit: Slurm keeps limits in whole minutes). "all" runs
# signals.time-limit beside the training suites; signals.checkpoint and signals.preempt
# (in_all=False) run where `signals` is named: they would make "all" 2.5 minutes, not 1.
# "rest" joins "all" only on clusters made with --rest (its check's ``applies``).
ALL = ("basic", "signals", "rest", "ddp", "fsdp", "deepspeed", "megatron")


class Suites(list):
    """Suite names in canonical order, and ``named``: those the user named (not through "all")."""

    def __init__(self, names: Sequence[str], named: Sequence[str]) -> None:
        super().__init__(names)
        self.named = set(named)

CHECKS: Sequence[Check] = (
    Check("basic.controller", "basic", basic.check_controller, "slurmctld answers (scontrol ping)", gate=True),
    Check("basic.nodes", "basic", basic.check_nodes,
          "every node is up and schedulable (idle); an interactive srun runs a step on one", gate=True),
    Check("basic.srun-env", "basic", basic.check_srun_env,
          "srun over all nodes: SLURM_PROCID/NODEID/LOCALID/NTASKS/JOB_NODELIST in batch and step", wide=True),
    Check("basic.gpus", "basic", basic.check_gpus, "each node's jobs see exactly its own GPUs (physical ids; numbered from 0 in containers and with device cgroups)"),
    Check("basic.sbatch-output", "basic", basic.check_sbatch_output, "an sbatch job writes its --output/--error files"),
    Check("basic.mpi", "basic", basic.check_mpi,
          "an MPI allreduce across 2 nodes, started by srun --mpi=pmix (mpi4py, system python3)", wide=True),
    Check("basic.container", "basic", container.check_container,
          "a 2-node step in a container made from a squashfs image (pyxis's options: mounts, workdir, "
          "remap-root) and a named container that a second step reuses", early=True),
    Check("basic.cpus-per-task", "basic", versions.check_cpus_per_task,
          "srun in a --cpus-per-task=2 job inherits it as this Slurm release does (lost in 22.05, back in 23.11)",
          wide=True),
    Check("basic.gpus-per-task", "basic", versions.check_gpus_per_task,
          "--gpus-per-task=1 gives each task its own GPU; --gpu-bind=none and the job's variables as this release does"),
    Check("basic.isolation", "basic", isolation.check_isolation,
          "nodes are machines of their own: 2 nodes bind one port at once, a connection comes from its node's "
          "address, srun finds /etc/slurm without SLURM_CONF, a job cannot open another's GPU", early=True),
    Check("basic.limits", "basic", isolation.check_limits,
          "a job over its --mem ends OUT_OF_MEMORY (cgroups enforce the limit)"),
    Check("basic.array", "basic", basic.check_array, "a job array sets SLURM_ARRAY_*"),
    Check("basic.dependency", "basic", basic.check_dependency, "--dependency=afterok runs only after its parent succeeded",
          early=True),
    Check("basic.requeue", "basic", basic.check_requeue,
          "a requeued job resumes from the checkpoint its first run wrote", early=True),
    Check("basic.accounting", "basic", basic.check_accounting,
          "a finished job is in sacct, COMPLETED with its node (clusters with --accounting)",
          applies=lambda spec: bool(getattr(spec, "accounting", False))),
    Check("signals.time-limit", "signals", basic.check_signal,
          "--signal=B:USR1@N reaches the batch script before the time limit", background=True),
    Check("signals.checkpoint", "signals", signals.check_checkpoint,
          "a --time=24:00:00 --signal=B:USR1@90 job moved by fault time-limit: its trap checkpoints "
          "and it ends TIMEOUT (2-2.5 min)", background=True, in_all=False),
    Check("signals.preempt", "signals", signals.check_preempt,
          "a job preempted by fault preempt (requeue) checkpoints on the signal and resumes from it",
          in_all=False),
    Check("rest.api", "rest", rest.check_rest,
          "a 2-node job submitted over Slurm's REST API with a token from scontrol token, polled to COMPLETED "
          "and read back (from slurmdbd too with accounting), newest API version; no or a bad token refused",
          applies=lambda spec: bool(getattr(spec, "rest", False))),
    Check("ddp.train", "ddp", training.check_ddp, "DistributedDataParallel across 2 nodes"),
    Check("fsdp.train", "fsdp", training.check_fsdp, "FSDP (fully_shard) across 2 nodes, sharded, DCP checkpoint reload"),
    Check("deepspeed.zero3", "deepspeed", training.check_deepspeed, "DeepSpeed ZeRO-3 across 2 nodes"),
    Check("megatron.tp2", "megatron", training.check_megatron, "megatron-core GPTModel, tensor parallel 2 across 2 nodes"),
    Check("faults.requeue-resume", "faults", faults.check_requeue_resume,
          "a 2-node DDP job loses its second node (fault kill), is requeued, resumes from its checkpoint "
          "and ends with the parameters of an uninterrupted run"),
    Check("faults.controller-restart", "faults", faults.check_controller_restart,
          "slurmctld killed with running, held, dependent and array jobs: after heal each keeps its id "
          "and ends COMPLETED"),
    Check("faults.accounting-outage", "faults", faults.check_accounting_outage,
          "slurmdbd down while jobs run: after heal sacct lists them COMPLETED (clusters with --accounting)",
          applies=lambda spec: bool(getattr(spec, "accounting", False))),
    Check("faults.gpu-faults", "faults", gpu_faults.check_gpu_faults,
          "fault gpu NODE --xid 79: the health check drains the node with the Xid in the reason; fault heal "
          "NODE: idle again (the two times; fake-GPU clusters with healthCheck:)"),
)


def parse_suites(text: str) -> Suites:
    """'basic,ddp' or 'all' -> suite names in canonical order; unknown names are a UsageError.
    'all' is every suite but faults ('all,faults' adds it)."""
    wanted = [s.strip().lower() for s in (text or "all").split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SUITES and s != "all"]
    if unknown:
        raise UsageError(f"unknown suite {', '.join(unknown)}", f"choose from {','.join(SUITES)} or all")
    named = [s for s in wanted if s != "all"]
    if not wanted or "all" in wanted:
        wanted = [*ALL, *(s for s in wanted if s not in ALL and s != "all")]
    return Suites([s for s in SUITES if s in wanted], named)


def checks_for(suites: Sequence[str], spec=None) -> List[Check]:
    """The suites' checks; the controller/node gates always come first (they cost ~0.1 s
    and turn "every training job hung" into "the controller does not answer"). Checks
    with ``applies`` join only when it holds for ``spec`` (accounting clusters); checks not
    ``in_all`` only where their suite was named (``suites.named``; a plain list: all named)."""
    named = getattr(suites, "named", set(suites))
    return [c for c in CHECKS if (c.gate or c.suite in suites)
            and (c.in_all or c.suite in named)
            and (c.applies is None or (spec is not None and c.applies(spec)))]
