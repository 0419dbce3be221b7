"""`render --like` and the --like flags at the real command line (no daemon starts)."""

from __future__ import annotations

import pytest
import yaml

from provisioner.config import load_spec
from tests.conftest import run_cli

H100 = "tests/data/like/h100-site/slurm.conf"


def test_render_like_writes_the_configs_the_spec_and_the_report(tmp_path):
    out = tmp_path / "out"
    proc = run_cli(["render", "--like", H100, "--max-nodes", "5", "--name", "hopper", "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"like {H100}: kept ") and "SlurmctldHost (one machine runs every daemon here)" in first
    conf = (out / "slurm.conf").read_text()
    assert "NodeName=gpu[001-003] " in conf and "Gres=gpu:h100:8 Features=ib,nvme,sapphirerapids" in conf
    assert "PartitionName=debug Nodes=gpu[001-003],cpu[001-002] Default=NO MaxTime=00:30:00" in conf
    assert "SelectTypeParameters=CR_Core_Memory" in conf and "EnforcePartLimits=ALL" in conf
    report = (out / "like-report.txt").read_text()
    assert "tests/data/like/h100-site/partitions.conf:2: PartitionName=gpu" in report
    assert "--max-nodes 5: kept 5 of 192 nodes: gpu[001-003],cpu[001-002]" in report
    # like-spec.yaml is a spec file: `up --config` on it is the same cluster
    spec_file = out / "like-spec.yaml"
    assert yaml.safe_load(spec_file.read_text())["name"] == "hopper"
    again = load_spec(str(spec_file), cpus=2, memory_mb=2000)
    from provisioner.like import like_spec
    mirrored, _ = like_spec(H100, max_nodes=5, name="hopper")
    assert again.nodes == mirrored.nodes and again.partitions == mirrored.partitions
    assert again.slurm_conf_extra == mirrored.slurm_conf_extra and again.accounting == mirrored.accounting


def test_verbose_prints_every_setting(tmp_path):
    proc = run_cli(["-v", "render", "--like", "tests/data/like/seed/slurm.conf", "--out", str(tmp_path / "o")],
                   tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tests/data/like/seed/slurm.conf:2: NodeHostname=moirai-h200  (one machine runs every daemon here)" \
        in proc.stdout


def test_other_flags_override_the_mirror(tmp_path):
    proc = run_cli(["render", "--like", "tests/data/like/a100-v100/slurm.conf", "--max-nodes", "3", "--accounting",
                    "--out", str(tmp_path / "o")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "AccountingStorageType=accounting_storage/slurmdbd" in (tmp_path / "o" / "slurm.conf").read_text()


@pytest.mark.parametrize("args, says", [
    (["--like", H100, "--config", "x.yaml"], "--config does not combine with --like"),
    (["--like", H100, "--nodes", "4"], "--nodes does not combine with --like"),
    (["--like", H100, "--cpus", "4"], "--cpus does not combine with --like"),
    (["--like", H100, "--fake-gpus", "4"], "--fake-gpus 4: with --like the conf says how many GPUs"),
    (["--like", H100, "--gpus", "x"], "--gpus: bad GPU id 'x'"),
    (["--max-nodes", "4"], "--max-nodes only goes with --like"),
    (["--gres-conf", "g.conf"], "--gres-conf only goes with --like"),
    (["--like", "nope/slurm.conf"], "nope/slurm.conf does not exist"),
    (["--like", H100], "192 nodes with 1024 GPUs, more than the 256 fake GPUs"),
    (["--like", H100, "--max-nodes", "1"], "--max-nodes 1 is too few"),
    (["--like", H100, "--max-nodes", "2", "--gres-conf", "nope.conf"], "gres.conf nope.conf does not exist"),
])
def test_bad_like_flags_are_one_line(tmp_path, args, says):
    for command in (["up", "--name", "likebad"], ["render", "--out", str(tmp_path / "o")]):
        proc = run_cli(command + args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
        assert not (tmp_path / "likebad").exists() and not (tmp_path / "o").exists()
