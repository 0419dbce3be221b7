"""--like on a production gres.conf with MIG, shards and MPS: slurm.conf's typed MIG GPUs
(gpu:3g.40gb:2) become the mirror's per-GPU `mig` layout over the GPUs gres.conf's MIG lines
are cut from (or the fewest that fit), shard/mps counts its per-GPU `shards`/`mps`; and
`simcluster check --like` knows those types (tests/data/like/mig-shard)."""

from __future__ import annotations

from click.testing import CliRunner

from provisioner.cli.main import cli
from provisioner.like import mirror
from tests.conftest import REPO
from tests.unit.conftest import spec_from
from tests.unit.like.conftest import dropped

CONF = REPO / "tests" / "data" / "like" / "mig-shard" / "slurm.conf"


def test_mig_and_shards_of_the_production_conf_become_spec_keys():
    spec = spec_from(mirror(str(CONF)).raw)
    mig01, _, gpu01, _ = spec.nodes
    # gres.conf cuts the instances from /dev/nvidia0 and /dev/nvidia1: two GPUs.
    assert len(mig01.gpus) == 2 and mig01.gpu_type == "h100"
    assert mig01.mig == (("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2))
    assert (len(gpu01.gpus), gpu01.shards, gpu01.mig) == (4, 8, ())


def test_without_gres_conf_the_fewest_gpus_that_fit(mirror_of, spec_of):
    node = spec_of("NodeName=m1 Gres=gpu:3g.40gb:4\n").nodes[0]
    assert (len(node.gpus), node.mig) == (2, (("3g.40gb", 2),))
    # Two 3g.40gb and a 1g.10gb take 9 of a card's 8 memory slices: no split fits, left out.
    m = mirror_of("NodeName=m1 Gres=gpu:3g.40gb:4,gpu:1g.10gb:2\n")
    assert "gpus" not in m.raw["nodes"][0] and "fit no GPU model's layout" in dropped(m)["Gres"]
    node = spec_of("NodeName=m1 Gres=gpu:1g.5gb:14\n").nodes[0]
    assert (len(node.gpus), node.gpu_type, node.mig) == (2, "a100-40gb", (("1g.5gb", 7),))


def test_what_the_spec_cannot_say_is_reported(mirror_of):
    m = mirror_of("NodeName=m1 Gres=gpu:h100:2,gpu:3g.40gb:2\nNodeName=s1 Gres=gpu:2,shard:8\n"
                  "NodeName=p1 Gres=gpu:2,mps:200\n")
    assert "Gres" in dropped(m)
    raw = {n["name"]: n for n in m.raw["nodes"]}
    assert "mig" not in raw["m1"] and raw["s1"]["shards"] == 4 and "mps" not in raw["p1"]
    assert "wrong CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in m.report.text()
    spec_from(m.raw)  # and what is kept is a valid spec


def check(tmp_path, header: str):
    job = tmp_path / "job.sh"
    job.write_text(f"#!/bin/bash\n#SBATCH {header}\nsrun hostname\n")
    return CliRunner().invoke(cli, ["check", "--no-shellcheck", "--like", str(CONF), str(job)])


def test_check_like_knows_the_mirrors_mig_and_shard_types(tmp_path):
    for fine in ("--gres=gpu:3g.40gb:1", "--gres=gpu:1g.10gb:4", "-p shared --gres=shard:2"):
        res = check(tmp_path, fine)
        assert res.exit_code == 0 and "no multi-node problems found" in res.output, (fine, res.output)
    res = check(tmp_path, "--gres=gpu:3g.20gb:1")
    assert res.exit_code != 0 and "has GPU type 3g.20gb" in res.output
    assert "its GPU types: 1g.10gb, 2g.20gb, 3g.40gb" in res.output
    res = check(tmp_path, "--gres=shard:1")
    assert "no node of partition mig has 'shard' (partition shared does)" in res.output
    res = check(tmp_path, "-p shared --gres=mps:10")
    assert "no generic resource 'mps' (only gpu, shard)" in res.output
