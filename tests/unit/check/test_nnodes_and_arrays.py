"""`simcluster check` on torchrun's node count (nnodes-mismatch) and on bash arrays that carry
launcher or srun options. Small scripts written for these tests, in the forms real projects use
(llama-cookbook's `srun torchrun` without --nnodes, the `TORCHRUN_ARGS=(...)` arrays of cluster
guides). Pure logic: nothing is started."""

from __future__ import annotations

import subprocess

import pytest

from provisioner.check.parse import parse_script
from provisioner.check.report import check_text
from provisioner.check.rules import apply_edits, check_script
from provisioner.check.rules.core import ERROR

HEAD = "#!/bin/bash\n#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:4\n#SBATCH --exclusive\n"
HEAD_LINES = 5
ADDR = 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'


def run(body, tmp_path, nodes="2", head=HEAD):
    path = tmp_path / "job.sbatch"
    path.write_text(head.format(nodes=nodes) + body)
    return check_text(str(path), path.read_text(), use_shellcheck=False)


def rules(findings, rule=None):
    return sorted((f.line, f.rule) for f in findings if rule is None or f.rule == rule)


def nnodes(findings):
    return [f for f in findings if f.rule == "nnodes-mismatch"]


# ---------------------------------------------------------------- nnodes-mismatch: the bug

def test_srun_torchrun_without_nnodes_is_an_error_with_its_line(tmp_path):
    """Each node's agent forms a one-node job: two trainings of 4 processes, no error."""
    found = nnodes(run("srun --kill-on-bad-exit=1 torchrun --nproc_per_node=4 train.py\n", tmp_path))
    assert [(f.line, f.severity) for f in found] == [(6, ERROR)]
    assert "no --nnodes (its default is 1)" in found[0].message
    assert "2 separate trainings (WORLD_SIZE 4, not 8)" in found[0].message
    assert "--nnodes=$SLURM_JOB_NUM_NODES --rdzv_backend=c10d" in found[0].fix


def test_llama_cookbook_form_c10d_shared_endpoint(tmp_path):
    """The real-world form: c10d on the head node, no --nnodes; the first node trains alone."""
    body = ('nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )\nhead_node=${nodes[0]}\n'
            'head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)\n'
            'srun --kill-on-bad-exit=1 torchrun --nproc_per_node 4 --rdzv_id $RANDOM --rdzv_backend c10d '
            '--rdzv_endpoint $head_node_ip:$((20000 + SLURM_JOB_ID % 20000)) ./finetuning.py --enable_fsdp\n')
    found = run(body, tmp_path)
    assert rules(found) == [(9, "nnodes-mismatch")]
    assert "trains alone (WORLD_SIZE 4, not 8); the other node waits as a spare" in found[0].message
    # c10d already numbers the nodes: the fix only adds the count
    assert found[0].fix.startswith("srun --kill-on-bad-exit=1 torchrun --nnodes=$SLURM_JOB_NUM_NODES --nproc_per_node 4")


def test_standalone_on_several_nodes(tmp_path):
    found = nnodes(run("srun -K torchrun --standalone --nproc_per_node=4 train.py\n", tmp_path, nodes="4"))
    assert len(found) == 1 and "--standalone makes each agent a one-node job" in found[0].message
    assert "4 separate trainings (WORLD_SIZE 4, not 16)" in found[0].message
    assert "--standalone" not in found[0].fix


def test_literal_nnodes_one_and_a_count_the_step_lacks(tmp_path):
    one = nnodes(run("srun -K torchrun --nnodes=1 --nproc_per_node=4 train.py\n", tmp_path))
    assert len(one) == 1 and "is given --nnodes 1" in one[0].message
    more = nnodes(run(ADDR + "srun -K torchrun --nnodes 4 --nproc_per_node=4 --rdzv_backend=c10d "
                      "--rdzv_endpoint=$MASTER_ADDR:29500 train.py\n", tmp_path))
    assert len(more) == 1 and "waits for 2 more nodes that never come" in more[0].message
    assert "--nnodes=$SLURM_JOB_NUM_NODES" in more[0].fix and "--nnodes 4" not in more[0].fix


def test_module_form_and_bash_c_and_helper(tmp_path):
    """python -m torch.distributed.run, inside `srun bash -c "..."`, and in a helper srun runs."""
    assert rules(run('srun -K bash -c "cd $SLURM_SUBMIT_DIR && python -m torch.distributed.run '
                     '--nproc_per_node 4 train.py"\n', tmp_path), "nnodes-mismatch") == [(6, "nnodes-mismatch")]
    (tmp_path / "launch.sh").write_text("#!/bin/bash\ntorchrun --nproc_per_node 4 train.py\n")
    found = nnodes(run("srun -K bash launch.sh\n", tmp_path))
    assert [(f.path.endswith("launch.sh"), f.line) for f in found] == [(True, 2)]


def test_options_in_a_string_variable_without_nnodes(tmp_path):
    body = ADDR + ('DIST_ARGS="--nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"\n'
                   "srun -K torchrun $DIST_ARGS train.py\n")
    assert rules(run(body, tmp_path), "nnodes-mismatch") == [(8, "nnodes-mismatch")]


# ---------------------------------------------------------------- nnodes-mismatch: not a bug

@pytest.mark.parametrize("launch", [
    "torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500 train.py",
    "torchrun --nnodes $SLURM_JOB_NUM_NODES --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500 x.py",
    "torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500 train.py",
    "torchrun --nnodes=1:4 --max_restarts=3 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500 x.py",
    "torchrun --nnode=$SLURM_NNODES --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500 train.py",
    "torchrun --nnodes=$NNODES --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500 train.py",
    "torchrun $UNKNOWN_ARGS train.py",
    'torchrun "$@"',
])
def test_node_count_given_or_not_known(launch, tmp_path):
    """--nnodes through Slurm's count, a literal that matches, an elastic range, argparse's
    prefix (--nnode), a variable, or options check cannot see (a variable never set, "$@")."""
    assert nnodes(run(ADDR + f"srun -K {launch}\n", tmp_path)) == []


@pytest.mark.parametrize("body, nodes", [
    ("srun -K torchrun --standalone --nproc_per_node=4 train.py\n", "1"),            # a one-node job
    ("torchrun --standalone --nproc_per_node=4 train.py\n", "2"),                     # batch shell: another rule
    ("srun -N1 -n1 torchrun --standalone --nproc_per_node=4 eval.py\n", "2"),         # a one-node step
    ("srun --ntasks=1 torchrun --nproc_per_node=4 eval.py\n", "2"),                   # one task: one node
    ('srun -w "$HEAD" torchrun --standalone --nproc_per_node=4 eval.py\n', "2"),      # hosts named: not known
    ("export PET_NNODES=$SLURM_NNODES\nsrun -K torchrun --nproc_per_node=4 --rdzv_backend=c10d "
     "--rdzv_endpoint=$MASTER_ADDR:29500 train.py\n", "2"),                           # torchrun reads PET_NNODES
    ("srun -K torchrun --nnodes 4 --nproc_per_node=4 train.py\n", "2-4"),             # a range: 4 may be right
])
def test_one_node_steps_and_counts_given_elsewhere(body, nodes, tmp_path):
    assert nnodes(run(body, tmp_path, nodes=nodes)) == []


def test_no_nodes_in_the_header_and_one_node_intent(tmp_path):
    """A template without --nodes is checked as -N 2: the finding says so."""
    head = "#!/bin/bash\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:4\n"
    found = nnodes(run(ADDR + "srun -K torchrun --nproc_per_node=4 --rdzv_backend=c10d "
                       "--rdzv_endpoint=$MASTER_ADDR:29500 train.py\n", tmp_path, head=head))
    assert len(found) == 1 and found[0].message.startswith("when submitted with -N 2 or more: ")


def test_options_set_two_ways_in_branches_are_not_guessed(tmp_path):
    """if/else of two option sets, one with --nnodes and one without: which runs is not known."""
    body = ADDR + ('if [ "$SLURM_NNODES" -gt 1 ]; then\n  ARGS="--nnodes $SLURM_NNODES --rdzv_backend c10d '
                   '--rdzv_endpoint $MASTER_ADDR:29500"\nelse\n  ARGS="--standalone"\nfi\n'
                   "srun -K torchrun $ARGS --nproc_per_node 4 train.py\n")
    assert nnodes(run(body, tmp_path)) == []


def test_srun_options_in_a_variable_that_make_one_node(tmp_path):
    body = 'SRUN_ARGS="--nodes=1 --ntasks=1"\nsrun $SRUN_ARGS torchrun --standalone --nproc_per_node 4 eval.py\n'
    assert nnodes(run(body, tmp_path)) == []
    body = "SRUN_ARGS=(--nodes=1 --ntasks=1)\nsrun \"${SRUN_ARGS[@]}\" torchrun --standalone --nproc_per_node 4 x.py\n"
    assert nnodes(run(body, tmp_path)) == []


# ---------------------------------------------------------------- arrays carry launcher options

ARRAY = ("TORCHRUN_ARGS=(\n    --nnodes 2\n    --nproc_per_node 4\n    --node_rank $SLURM_NODEID\n"
         "    --master_addr $MASTER_ADDR\n    --master_port 29500\n)\n")


def test_node_rank_inside_an_array_is_found_at_its_line(tmp_path):
    found = run(ADDR + ARRAY + 'srun -K torchrun "${TORCHRUN_ARGS[@]}" train.py\n', tmp_path)
    assert rules(found) == [(14, "rank-var-in-batch-shell")]
    assert "${TORCHRUN_ARGS[@]} holds $SLURM_NODEID" in found[0].message and "(line 10)" in found[0].message


def test_the_array_fix_works_in_bash(tmp_path):
    """The fix escapes the element and runs the step through bash -c with ${ARGS[*]}: each task
    then expands its own node id (run here with a stand-in srun and torchrun)."""
    path = tmp_path / "job.sbatch"
    path.write_text(HEAD.format(nodes=2) + ADDR + ARRAY + 'srun -K torchrun "${TORCHRUN_ARGS[@]}" train.py\n')
    script = parse_script(str(path), path.read_text())
    (f,) = [f for f in check_script(script) if f.rule == "rank-var-in-batch-shell"]
    fixed = apply_edits({script.path: script.text}, f.edits)[script.path]
    assert 'bash -c "torchrun ${TORCHRUN_ARGS[*]} train.py"' in fixed and "--node_rank \\$SLURM_NODEID" in fixed
    path.write_text(fixed)
    assert [x for x in check_script(parse_script(str(path), fixed)) if x.severity == ERROR] == []
    stub = ('srun() { while [[ $1 == -* ]]; do shift; done; for id in 0 1; do SLURM_NODEID=$id "$@"; done; }\n'
            'scontrol() { echo node1; }\ntorchrun() { echo "$*"; }\nexport -f torchrun\n')
    out = subprocess.run(["bash", "-c", stub + fixed], capture_output=True, text=True, check=True).stdout
    assert [line.split("--node_rank ")[1].split()[0] for line in out.splitlines()] == ["0", "1"]


def test_array_with_c10d_ignores_the_node_rank_and_appends_are_followed(tmp_path):
    body = ADDR + ("TORCHRUN_ARGS=(--nproc_per_node 4 --node_rank $SLURM_NODEID)\n"
                   "TORCHRUN_ARGS+=(--nnodes $SLURM_NNODES --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500)\n"
                   'srun -K torchrun "${TORCHRUN_ARGS[@]}" train.py\n')
    assert rules(run(body, tmp_path)) == []


def test_declare_a_and_local_arrays_and_elements(tmp_path):
    """`declare -a` arrays are followed; an element (${A[0]}) or a length (${#A[@]}) is not the array."""
    body = ADDR + ('declare -a DIST=(--nnodes=$SLURM_NNODES --nproc_per_node=4 --node_rank=$SLURM_NODEID '
                   "--master_addr=$MASTER_ADDR --master_port=29500)\n"
                   'srun -K torchrun "${DIST[@]}" train.py\n')
    assert rules(run(body, tmp_path)) == [(8, "rank-var-in-batch-shell")]
    body = ADDR + ("HOSTS=($(scontrol show hostnames $SLURM_JOB_NODELIST))\nN=${#HOSTS[@]}\n"
                   "srun -K torchrun --nnodes=$N --nproc_per_node=4 --rdzv_backend=c10d "
                   "--rdzv_endpoint=${HOSTS[0]}:29500 train.py\n")
    assert rules(run(body, tmp_path)) == []


def test_array_without_nnodes_is_the_nnodes_bug(tmp_path):
    body = ADDR + ("declare -a TORCHRUN_ARGS=(\n    --nproc_per_node=4\n    --rdzv_backend=c10d\n"
                   "    --rdzv_endpoint=$MASTER_ADDR:29500\n)\n"
                   'srun -K -l torchrun "${TORCHRUN_ARGS[@]}" train.py\n')
    found = nnodes(run(body, tmp_path))
    assert [f.line for f in found] == [12]
    assert found[0].fix.startswith('srun -K -l torchrun --nnodes=$SLURM_JOB_NUM_NODES "${TORCHRUN_ARGS[@]}"')
