"""The corpus (tests/data/like/): each production-style conf mirrors into the spec its
expect.yaml says; each bad one is refused in one line naming its file and line."""

from __future__ import annotations

import pytest
import yaml

from provisioner.config import load_spec
from provisioner.like import mirror
from provisioner.like.gres import parse_gres
from provisioner.like.mapping import parse_conf
from provisioner.like.production import apply_gres, settle_sharing
from provisioner.like.reader import read_conf
from provisioner.like.report import Report
from tests.conftest import REPO, run_cli
from tests.unit.conftest import spec_from

CORPUS = REPO / "tests" / "data" / "like"
CONFS = sorted(p.parent.name for p in CORPUS.glob("*/expect.yaml"))


def expect(name: str):
    return yaml.safe_load((CORPUS / name / "expect.yaml").read_text())


def test_the_corpus_has_at_least_eight_confs():
    assert len(CONFS) >= 8, CONFS


@pytest.mark.parametrize("name", CONFS)
def test_each_conf_mirrors_as_expected(name):
    want = expect(name)
    m = mirror(str(CORPUS / name / "slurm.conf"), max_nodes=want["maxNodes"])
    spec = spec_from(m.raw)
    assert [n.name for n in spec.nodes] == want["nodes"]
    assert [p.name for p in spec.partitions] == want["partitions"]
    assert [p.name for p in spec.partitions if p.default] == [want["default"]]
    assert spec.accounting is want["accounting"]
    assert [a.name for a in spec.accounts] == want.get("accounts", [])
    assert [q.name for q in spec.qos] == want.get("qos", [])
    assert set(want["kept"]) <= set(m.report.kept_keys()), m.report.text()
    assert set(want["dropped"]) <= set(m.report.dropped_keys()), m.report.text()
    for header in want["accepted"] + [r["args"] for r in want["refused"]]:
        assert header.split()  # a header to submit: tests/integration/test_like.py runs them


def test_the_seed_conf_is_the_seed_example():
    ours = load_spec(None, {"name": "node6-node7"}, cpus=2, memory_mb=2000,
                     base=mirror(str(CORPUS / "seed" / "slurm.conf")).raw)
    assert ours == load_spec(str(REPO / "configs/examples/node6-node7-one-gpu-each.yaml"), {"fakeGpus": True},
                             cpus=2, memory_mb=2000)


def full_shapes(name: str):
    """{partition: shapes} of every node of a corpus conf (no scaling, no GPU ids)."""
    path = CORPUS / name / "slurm.conf"
    report = Report(source=name)
    parsed = parse_conf(read_conf(path), report, name)
    if (path.parent / "gres.conf").exists():
        apply_gres(parsed, parse_gres(read_conf(path.parent / "gres.conf"), list(parsed.nodes)), report)
    settle_sharing(parsed, report)
    return {p.name: {parsed.nodes[n].shape for n in p.nodes} for p in parsed.partitions}


@pytest.mark.parametrize("name", CONFS)
def test_every_partition_keeps_its_shapes_when_scaled(name):
    spec = spec_from(mirror(str(CORPUS / name / "slurm.conf"), max_nodes=expect(name)["maxNodes"]).raw)
    nodes = {n.name: n for n in spec.nodes}
    kept = {p.name: {(nodes[x].cpus, nodes[x].memory, len(nodes[x].gpus), nodes[x].gpu_type, nodes[x].features,
                      nodes[x].mig, nodes[x].shards, nodes[x].mps)
                     for x in p.nodes} for p in spec.partitions}
    assert kept == full_shapes(name)


BAD = {
    "no-name.conf": "no-name.conf:3: NodeName line has no name",
    "missing-include.conf": "missing-include.conf:3: include nodes-not-copied.conf: no such file",
    "bad-hostlist.conf": "bad-hostlist.conf:2: Nodes=gpu[001-008: bad host list 'gpu[001-008': '[' is not closed",
    "unknown-node.conf": "unknown-node.conf:2: partition 'gpu' names node 'gpu005', which no NodeName line defines",
    "bad-nodename.conf": "bad-nodename.conf:2: node name 'GPU01' (and 3 more) cannot be used here",
    "not-key-value.conf": "not-key-value.conf:3: 'Default' is not a Key=Value setting",
    "duplicate-node.conf": "duplicate-node.conf:2: node 'n4' is defined again (first at ",
    "no-nodes.conf": "no-nodes.conf: no NodeName line: there are no nodes to mirror",
    "bad-cpus.conf": "bad-cpus.conf:1: CPUs=lots is not a whole number",
}


def test_every_bad_file_has_a_case():
    assert sorted(BAD) == sorted(p.name for p in (CORPUS / "bad").glob("*.conf"))


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_conf_is_one_line_with_file_and_line(name, tmp_path):
    proc = run_cli(["render", "--like", f"tests/data/like/bad/{name}", "--out", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: tests/data/like/bad/"), proc.stderr
    assert BAD[name] in lines[0]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
