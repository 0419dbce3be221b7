"""What `simcluster check` says where the outcome depends on a program it cannot read, and
where a launcher ignores the node rank (c10d rendezvous, also through a variable that carries
the launcher's options). Small scripts written for these tests, each in the form real
projects use. Pure logic: nothing is started."""

from __future__ import annotations

import json

from click.testing import CliRunner

from provisioner.check.report import check_text, exit_code, summary
from provisioner.check.rules.core import ERROR, NOTE, WARNING
from provisioner.cli.main import cli

HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node={tpn}\n#SBATCH --gres=gpu:{gpus}\n#SBATCH --exclusive\n"


def run(body, tmp_path, tpn=1, gpus=4, files=None):
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "job.sbatch"
    path.write_text(HEAD.format(tpn=tpn, gpus=gpus) + body)
    return check_text(str(path), path.read_text(), use_shellcheck=False)


def rules(findings, level=None):
    return sorted((f.line, f.rule) for f in findings if level is None or f.severity == level)


ADDR = 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'


# ---------------------------------------------------------------- c10d ignores the node rank

def test_accelerate_c10d_machine_rank_in_a_launcher_string_is_fine(tmp_path):
    """`--machine_rank $SLURM_PROCID` expanded once by the batch shell, as open-r1 and the
    alignment handbook write it: accelerate hands it to torchrun, which ignores it under c10d."""
    body = (ADDR + 'export LAUNCHER="ACCELERATE_LOG_LEVEL=info accelerate launch --num_machines 2 '
            '--num_processes 8 --gradient_accumulation_steps 4 --main_process_ip $MASTER_ADDR '
            '--main_process_port $((20000 + SLURM_JOB_ID % 20000)) --machine_rank $SLURM_PROCID '
            '--rdzv_backend=c10d --tee 3"\nexport CMD="train.py --lr 1"\n'
            'SRUN_ARGS="--kill-on-bad-exit=1 --nodes=2 --ntasks=2"\nsrun $SRUN_ARGS bash -c "$LAUNCHER $CMD"\n')
    assert rules(run(body, tmp_path)) == []


def test_accelerate_static_machine_rank_in_a_launcher_string_is_an_error(tmp_path):
    body = (ADDR + 'export LAUNCHER="accelerate launch --num_machines 2 --num_processes 8 '
            '--main_process_ip $MASTER_ADDR --main_process_port $((20000 + SLURM_JOB_ID % 20000)) '
            '--machine_rank $SLURM_PROCID"\nexport CMD="train.py"\n'
            'srun --kill-on-bad-exit=1 bash -c "$LAUNCHER $CMD"\n')
    found = run(body, tmp_path)
    assert (9, "rank-var-in-batch-shell") in rules(found, ERROR)


def test_accelerate_c10d_in_srun_cmd_variable(tmp_path):
    """`srun $CMD` with CMD="$LAUNCHER ..." (the accelerate Slurm example's form)."""
    body = (ADDR + 'export LAUNCHER="accelerate launch --num_machines 2 --num_processes 8 --rdzv_backend c10d '
            '--main_process_ip $MASTER_ADDR --main_process_port $((20000 + SLURM_JOB_ID % 20000)) '
            '--machine_rank $SLURM_PROCID --use_fsdp --fsdp_sharding_strategy FULL_SHARD"\n'
            'export CMD="$LAUNCHER train.py"\nsrun --kill-on-bad-exit=1 $CMD\n')
    assert rules(run(body, tmp_path)) == []


def test_torchrun_options_variable_with_c10d(tmp_path):
    """`srun torchrun $DIST_ARGS train.py`: DIST_ARGS carries --rdzv_backend c10d and the node
    rank; the rank is ignored there."""
    args = ('--nnodes 2 --nproc_per_node 4 --rdzv_backend {b} --rdzv_endpoint $MASTER_ADDR:29500 '
            '--node_rank $SLURM_NODEID')
    body = ADDR + f'DIST_ARGS="{args}"\nsrun --kill-on-bad-exit=1 torchrun $DIST_ARGS train.py\n'
    assert rules(run(body.format(b="c10d"), tmp_path)) == []
    assert rules(run(body.format(b="static"), tmp_path), ERROR) == [(8, "rank-var-in-batch-shell")]


def test_torchrun_command_variable_with_c10d(tmp_path):
    """`srun $LAUNCHER train.py` with the whole torchrun command in LAUNCHER."""
    body = (ADDR + 'LAUNCHER="torchrun --nnodes 2 --nproc_per_node 4 --rdzv_backend=c10d '
            '--rdzv_endpoint $MASTER_ADDR:29500 --node_rank $SLURM_NODEID"\n'
            'srun --kill-on-bad-exit=1 $LAUNCHER train.py\n')
    assert rules(run(body, tmp_path)) == []
    static = body.replace("--rdzv_backend=c10d ", "")
    assert [r for _, r in rules(run(static, tmp_path), ERROR)] == ["rank-var-in-batch-shell"]


def test_c10d_variable_does_not_hide_another_rank_variable(tmp_path):
    """Only the node rank is ignored: a RANK handed as a program argument still collides."""
    body = (ADDR + 'DIST_ARGS="--nnodes 2 --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"\n'
            'srun --kill-on-bad-exit=1 torchrun $DIST_ARGS train.py --seed $SLURM_PROCID\n')
    assert [r for _, r in rules(run(body, tmp_path), ERROR)] == ["rank-var-in-batch-shell"]


# ---------------------------------------------------------------- programs check cannot read

SRUN_PY = ADDR + "export MASTER_ADDR MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\nsrun --kill-on-bad-exit=1 python {prog}\n"


def test_no_rank_env_for_an_unseen_program_is_a_note(tmp_path):
    found = run(SRUN_PY.format(prog="train.py"), tmp_path, tpn=4)
    assert rules(found, NOTE) == [(8, "no-rank-env")] and rules(found, WARNING) == []
    assert "cannot read" in found[0].message


def test_no_rank_env_for_a_program_read_beside_that_maps_nothing_stays_a_warning(tmp_path):
    train = "import torch.distributed as dist\ndist.init_process_group('nccl', init_method='env://')\n"
    found = run(SRUN_PY.format(prog="train.py"), tmp_path, tpn=4, files={"train.py": train})
    assert rules(found, WARNING) == [(8, "no-rank-env")]


def test_program_read_beside_that_maps_slurm_gives_nothing(tmp_path):
    train = "import os\nrank = int(os.environ['SLURM_PROCID'])\nimport torch.distributed as dist\n"
    assert rules(run(SRUN_PY.format(prog="train.py"), tmp_path, tpn=4, files={"train.py": train})) == []


def test_fewer_processes_than_gpus_of_an_unseen_module_is_a_note(tmp_path):
    """One server process per node (sglang/vLLM tensor parallel) uses every GPU itself."""
    found = run(SRUN_PY.format(prog="-m sglang.launch_server --tp 16"), tmp_path, tpn=1, gpus=8)
    assert ("gpus-per-node-mismatch" in [r for _, r in rules(found, NOTE)]
            and "gpus-per-node-mismatch" not in [r for _, r in rules(found, WARNING)])


def test_fewer_processes_than_gpus_of_a_read_program_stays_a_warning(tmp_path):
    train = "import os\nrank = int(os.environ['SLURM_PROCID'])\nimport torch.distributed as dist\n"
    found = run(SRUN_PY.format(prog="train.py"), tmp_path, tpn=1, gpus=8, files={"train.py": train})
    assert rules(found, WARNING) == [(8, "gpus-per-node-mismatch")]


def test_fewer_torchrun_workers_than_gpus_stays_a_warning(tmp_path):
    body = ADDR + ("srun --kill-on-bad-exit=1 torchrun --nnodes 2 --nproc_per_node 4 --rdzv_backend c10d "
                   "--rdzv_endpoint $MASTER_ADDR:29500 train.py\n")
    assert rules(run(body, tmp_path, gpus=8), WARNING) == [(7, "gpus-per-node-mismatch")]


LAUNCH = ADDR + ("srun --kill-on-bad-exit=1 bash -c \"python -m torch.distributed.launch {opt}--nnodes 2 "
                 "--node_rank \\$SLURM_NODEID --nproc_per_node 4 --master_addr $MASTER_ADDR "
                 "--master_port $((20000 + SLURM_JOB_ID % 20000)) train.py\"\n")


def test_deprecated_launch_of_an_unseen_program_is_a_note(tmp_path):
    assert rules(run(LAUNCH.format(opt=""), tmp_path)) == [(7, "deprecated-torch-launch")]
    assert rules(run(LAUNCH.format(opt=""), tmp_path), NOTE) == [(7, "deprecated-torch-launch")]


def test_deprecated_launch_of_a_program_without_local_rank_is_a_warning(tmp_path):
    train = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr')\np.parse_args()\n"
    found = run(LAUNCH.format(opt=""), tmp_path, files={"train.py": train})
    assert rules(found, WARNING) == [(7, "deprecated-torch-launch")] and "unrecognized" in found[0].message
    # with --use_env nothing is passed: deprecation only
    assert rules(run(LAUNCH.format(opt="--use_env "), tmp_path, files={"train.py": train}), NOTE) \
        == [(7, "deprecated-torch-launch")]


def test_deprecated_launch_of_a_program_that_parses_local_rank_is_a_note(tmp_path):
    train = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int)\n"
    assert rules(run(LAUNCH.format(opt=""), tmp_path, files={"train.py": train}), NOTE) \
        == [(7, "deprecated-torch-launch")]


# ---------------------------------------------------------------- elastic torchrun

ELASTIC = ADDR + ('srun torchrun --nnodes {n} --nproc_per_node 4 --max-restarts {r} --rdzv_backend c10d '
                  '--rdzv_endpoint $MASTER_ADDR:29500 train.py\n')


def test_elastic_torchrun_needs_no_kill_on_bad_exit(tmp_path):
    assert rules(run(ELASTIC.format(n="2", r="3"), tmp_path)) == []
    assert rules(run(ELASTIC.format(n="1:2", r="0"), tmp_path)) == []
    assert rules(run(ELASTIC.format(n="2", r="${MAX_RESTARTS:-5}"), tmp_path)) == []
    assert rules(run(ELASTIC.format(n="2", r="0"), tmp_path), WARNING) == [(7, "no-kill-on-bad-exit")]


# ---------------------------------------------------------------- how notes are reported

def test_notes_are_counted_apart_and_never_decide_the_exit_status(tmp_path):
    found = run(SRUN_PY.format(prog="train.py"), tmp_path, tpn=4)
    assert [f.severity for f in found] == [NOTE]
    assert exit_code(found) == 0 and exit_code(found, strict=True) == 0
    line = summary(found, 1)
    assert "no multi-node problems found" in line and "1 note on programs check cannot read" in line
    res = CliRunner().invoke(cli, ["check", "--json", "--no-shellcheck", str(tmp_path / "job.sbatch")])
    data = json.loads(res.output)
    assert res.exit_code == 0 and data["notes"] == 1 and data["warnings"] == 0 and data["errors"] == 0
    res = CliRunner().invoke(cli, ["check", "--no-shellcheck", str(tmp_path / "job.sbatch")])
    assert ": note: " in res.output and "[no-rank-env]" in res.output


def test_every_example_gives_what_docs_check_md_says():
    """examples/ is clean but for the seed's Enroot pre-launch script, kept as the seed wrote it."""
    from tests.conftest import REPO
    scripts = sorted(p for p in (REPO / "examples").rglob("*")
                     if p.suffix in (".sh", ".slurm", ".sbatch") and p.is_file())
    assert len(scripts) >= 8
    got = {str(p.relative_to(REPO)): rules(check_text(str(p.relative_to(REPO)), p.read_text(),
                                                      use_shellcheck=False)) for p in scripts}
    prelaunch = "examples/enroot/lit-gpt/train-redpajama-prelaunch.sh"
    assert got.pop(prelaunch) == [(14, "fixed-master-port"), (23, "no-kill-on-bad-exit"), (26, "no-kill-on-bad-exit")]
    assert all(v == [] for v in got.values()), got
