"""--like reads a slurm.conf as Slurm does: each conf here is read by Slurm's own parser
(the host's libslurm, through tests/unit/like/slurm_reference.py) and by --like's, and
the nodes, partitions, CPUs, memory, GRES and features must agree.

The confs: the --like corpus (tests/data/like/*/slurm.conf) that Slurm can read on this
machine, the syntax corpus written from parse_config.c's rules (tests/data/like/syntax/:
continuations, comments and escapes, keys and quotes, DEFAULT records, includes, host lists,
CRLF) and Slurm's own example and testsuite confs (tests/data/like/slurm-own/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from provisioner.config import hostlist
from provisioner.config.validate import TOKEN_RE
from provisioner.like.mapping import _Mapper, parse_conf
from provisioner.like.reader import LikeError, Where, read_conf
from provisioner.like.report import Report
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "like"
# Corpus confs Slurm 22.05 does not read here, each on purpose: h100-site includes the production
# host's /etc/slurm/nodes.conf (--like looks beside the copy), nodesets includes a glob (newer Slurm
# releases expand those), cpu-hpc is written for an older Slurm (CacheGroups, gone in 22.05) and
# tier-preempt has a key no Slurm knows (SomeSiteKnob): --like reports what it drops.
NOT_READABLE_BY_SLURM_HERE = {"h100-site", "nodesets", "cpu-hpc", "tier-preempt"}
CONFS = sorted(
    [p for p in DATA.glob("*/slurm.conf") if p.parent.name not in NOT_READABLE_BY_SLURM_HERE | {"bad"}]
    + list((DATA / "syntax").glob("*.conf")) + list((DATA / "slurm-own").glob("*.conf*")))


def slurm_reads(conf: Path, tmp_path: Path) -> dict:
    """What Slurm's parser reads from ``conf``. A fragment without ClusterName/SlurmctldHost
    is read as production's slurm.conf includes it: from a top file that has them."""
    top = tmp_path / "top.conf"
    top.write_text(f"ClusterName=reference\nSlurmctldHost=localhost\ninclude {conf.resolve()}\n")
    proc = subprocess.run([sys.executable, "-m", "tests.unit.like.slurm_reference", str(top)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"Slurm refuses {conf}: {proc.stderr}"
    return json.loads(proc.stdout)


def slurm_members(ref: dict, names: List[str], all_nodes: List[str], features: Dict[str, List[str]]) -> List[str]:
    """A partition's nodes as slurmctld resolves them (nodespec_to_hostlist): ALL, node sets."""
    if len(names) == 1 and names[0].upper() == "ALL":
        return list(all_nodes)
    sets = {s["name"]: s for s in ref["nodesets"]}
    out: List[str] = []
    for name in names:
        if name in sets:
            if sets[name]["feature"]:
                out += [n for n in all_nodes if sets[name]["feature"] in features[n]]
            if sets[name]["nodes"]:
                out += hostlist.expand(sets[name]["nodes"])
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("conf", CONFS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_like_reads_what_slurm_reads(conf, tmp_path):
    ref = slurm_reads(conf, tmp_path)
    ours = read_conf(conf)
    # Every NodeName record, in order, with the names Slurm's hostlist gives.
    slurm_nodes = [(r["names"], r) for r in ref["nodes"]]
    our_records = [line for line in ours.lines if line.kind == "nodename" and line.head.upper() != "DEFAULT"]
    assert [hostlist.expand(line.head) for line in our_records] == [names for names, _ in slurm_nodes]
    assert [line.head for line in ours.lines if line.kind == "partitionname" and line.head.upper() != "DEFAULT"] \
        == [p["name"] for p in ref["partitions"]]
    try:
        parsed = parse_conf(ours, Report(source=conf.name), conf.name)
    except LikeError as exc:
        # Only simcluster's own limit on node names may refuse a conf Slurm reads.
        assert "cannot be used here" in exc.message, exc.message
        return
    future = {n for names, r in slurm_nodes if (r["state"] or "").upper().startswith("FUTURE") for n in names}
    features = {n: [f for f in (r["features"] or "").split(",") if f] for names, r in slurm_nodes for n in names}
    gres_of = _Mapper(ours, Report(source=conf.name), conf.name)._gres
    want = {}
    for names, r in slurm_nodes:
        for n in names:
            if n not in future:
                want[n] = (r["cpus"], r["memory"], gres_of(Where(conf.name, 0), r["gres"] or ""),
                           sorted({f.strip() for f in features[n] if TOKEN_RE.match(f.strip())}))
    got = {n.name: (n.cpus or 1, n.memory or 1, (n.gpus, n.gpu_type), sorted(n.features))
           for n in parsed.nodes.values()}
    assert got == want
    all_nodes = [n for names, _ in slurm_nodes for n in names if n not in future]
    slurm_parts = {p["name"]: set(slurm_members(ref, p["names"], all_nodes, features)) - future
                   for p in ref["partitions"]}
    if not ref["partitions"]:
        # A fragment without PartitionName lines: --like makes one partition of every node.
        assert [set(p.nodes) for p in parsed.partitions] == [set(all_nodes)]
        return
    assert {p.name: set(p.nodes) for p in parsed.partitions} == {k: v for k, v in slurm_parts.items() if v}
    defaults = [p["name"] for p in ref["partitions"] if p["default"] and slurm_parts[p["name"]]]
    if defaults:  # slurmctld: the last Default=YES wins
        assert [p.name for p in parsed.partitions if p.default] == defaults[-1:]


def test_the_reference_is_slurm_and_refuses_what_slurm_refuses(tmp_path):
    """The reference is no echo of --like: a continued line's leading blanks split the value
    in Slurm, and Slurm refuses the leftover word."""
    conf = tmp_path / "split.conf"
    conf.write_text("NodeName=a0[1-2],\\\n   b0[1-2] CPUs=2\n")
    top = tmp_path / "top.conf"
    top.write_text(f"ClusterName=reference\nSlurmctldHost=localhost\ninclude {conf}\n")
    proc = subprocess.run([sys.executable, "-m", "tests.unit.like.slurm_reference", str(top)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and 'Parse error in file' in proc.stderr and "b0[1-2] CPUs=2" in proc.stderr
