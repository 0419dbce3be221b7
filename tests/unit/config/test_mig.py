"""Fake MIG, shards and MPS in the spec: layouts parsed and placed as NVIDIA's driver places
them (provisioner/config/mig.py), and the spec's mig/shards/mps keys judged against each
node's GPU model (provisioner/config/validate.py), every problem in one line."""

from __future__ import annotations

import pytest

from provisioner.config.gpus import mig_instances, model_of
from provisioner.config.mig import cap_minors, parse_layout, place
from provisioner.errors import ConfigError
from tests.conftest import run_cli
from tests.unit.conftest import spec_from


def placed(text: str, family: str = "80gb"):
    return [(i.profile, i.gi, i.start, i.size) for i in place(parse_layout(text), family)]


def test_layouts_parse_from_text_lists_and_mappings():
    assert parse_layout("3g.40gb:2,1g.10gb") == (("3g.40gb", 2), ("1g.10gb", 1))
    assert parse_layout({"3g.40gb": 2}) == parse_layout(["3g.40gb:2"]) == (("3g.40gb", 2),)
    assert parse_layout("MIG 1g.10gb:3,1g.10gb:2") == (("1g.10gb", 5),)  # nvidia-smi's spelling too


@pytest.mark.parametrize("bad, says", [
    ("", "empty MIG layout"), ("3g:2", "not a MIG profile like"), ("3g.40gb:0", "from 1 to 7"),
    ("3g.40gb:x", "from 1 to 7")])
def test_bad_layouts_say_what_is_wrong(bad, says):
    with pytest.raises(ValueError, match=says):
        parse_layout(bad)


def test_placement_follows_the_driver():
    assert placed("3g.40gb:2") == [("3g.40gb", 1, 0, 4), ("3g.40gb", 2, 4, 4)]
    assert placed("7g.80gb") == [("7g.80gb", 0, 0, 8)]  # the whole GPU is GPU instance 0
    assert len(placed("1g.10gb:7")) == 7
    # 3g+2g+1g+1g fits only with the 3g at slice 4: found by trying the other placements.
    assert sorted(p[2] for p in placed("3g.40gb,2g.20gb,1g.10gb:2")) == [0, 2, 3, 4]
    assert placed("1g.6gb:4", "24gb")[-1] == ("1g.6gb", 4, 3, 1)  # A30: 4 slices


@pytest.mark.parametrize("layout, family, says", [
    ("3g.40gb:2,1g.10gb:3", "80gb", "takes 9 compute slices; GPU has 7"),
    ("4g.40gb:1,3g.40gb:1,1g.10gb:1", "80gb", "takes 8 compute slices"),
    ("3g.40gb:2,1g.10gb:1", "80gb", "does not fit"),
    ("3g.40gb", "40gb", "3g.40gb is not a MIG profile of GPU (its profiles: 1g.5gb,"),
    ("3g.40gb", "", "GPU has no MIG")])
def test_layouts_that_do_not_fit_are_refused(layout, family, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        place(parse_layout(layout), family, "GPU")


def test_models_know_their_mig_family():
    assert model_of("h100").mig == model_of("a100").mig == model_of(None).mig == "80gb"
    assert model_of("a100_40gb").mig == "40gb" and model_of("h200").mig == "141gb"
    assert model_of("l40s").mig == model_of("v100").mig == model_of(None, "My GPU 48GB").mig == ""


def test_cap_minors_are_the_drivers():
    assert cap_minors(0, 2) == (21, 22) and cap_minors(1, 1) == (147, 148)


def test_spec_keys_give_nodes_their_layout_shards_and_mps():
    spec = spec_from({"fakeGpus": True, "gpuType": "h100", "mig": "3g.40gb:2", "nodes": [
        {"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [2], "mig": "7g.80gb"}, {"name": "c"}]})
    a, b, c = spec.nodes
    assert a.mig == (("3g.40gb", 2),) and b.mig == (("7g.80gb", 1),)  # the top level's, or the node's own
    assert c.mig == () and c.gpus == ()  # no GPUs: nothing to cut
    # Slurm's order: type by type, then GPU by GPU.
    assert [(g, i.profile, i.gi) for g, i in mig_instances(a)] == [
        (0, "3g.40gb", 1), (0, "3g.40gb", 2), (1, "3g.40gb", 1), (1, "3g.40gb", 2)]
    spec = spec_from({"fakeGpus": True, "nodes": [{"name": "a", "gpus": [0], "shards": 4}, {"name": "b", "gpus": [1]}]})
    assert [(n.shards, n.mps, n.mig) for n in spec.nodes] == [(4, 0, ()), (0, 0, ())]
    assert [n.mps for n in spec_from({"fakeGpus": 2, "mps": 100}).nodes] == [100, 100]


def test_the_state_file_round_trip_keeps_the_sharing():
    from provisioner.config.types import ClusterSpec
    spec = spec_from({"fakeGpus": 2, "mig": "3g.40gb:1,1g.10gb:2"})
    assert ClusterSpec.from_dict(spec.to_dict()) == spec
    spec = spec_from({"fakeGpus": 2, "shards": 8})
    assert ClusterSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("raw, says", [
    ({"fakeGpus": 2, "mig": "3g.40gb:2,1g.10gb:3"}, "mig: 3g.40gb:2,1g.10gb:3 takes 9 compute slices"),
    ({"fakeGpus": 2, "gpuType": "a100-40gb", "mig": "3g.40gb"}, "not a MIG profile of NVIDIA A100-SXM4-40GB"),
    ({"fakeGpus": 2, "gpuType": "l40s", "mig": "3g.40gb"}, "NVIDIA L40S has no MIG"),
    ({"gpus": "0,1", "mig": "3g.40gb"}, "simulated on fake GPUs only"),
    ({"fakeGpus": 2, "mig": "3g.40gb", "shards": 2}, "MIG instances or shared as shards/MPS, not both"),
    ({"fakeGpus": 2, "shards": 2, "mps": 100}, "shards and MPS in one cluster"),
    ({"fakeGpus": 2, "shards": 0}, "shards: 0 is out of range"),
    ({"fakeGpus": True, "nodes": [{"name": "a", "gpus": [0]}, {"name": "b", "mps": 50}]},
     "nodes[1].mps: the node has no GPUs")])
def test_bad_sharing_is_one_clear_problem(raw, says):
    with pytest.raises(ConfigError) as err:
        spec_from(raw)
    assert says in str(err.value) and len(err.value.problems) == 1, str(err.value)


def test_up_refuses_a_layout_that_does_not_fit_in_one_line(tmp_path):
    proc = run_cli(["up", "--name", "migbad", "--fake-gpus", "2", "--mig", "3g.40gb:3"], tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "takes 9 compute slices" in proc.stderr, proc.stderr
    assert not (tmp_path / "migbad").exists()
