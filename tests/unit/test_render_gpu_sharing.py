"""Rendering of fake-GPU sharing (docs/gpus.md#mig-shards-and-mps): gres.conf's typed MIG
lines (MultipleFiles of the parent GPU and nvidia-caps devices; File= of the instance's where
the cluster also has shards or MPS), shard and mps lines on every GPU, slurm.conf's GresTypes
and the nodes' Gres=, and the TaskProlog's MIG UUIDs."""

from __future__ import annotations

from provisioner.render import gres_per_node, render_all
from tests.unit.conftest import fixed_inputs, spec_from


def rendered(raw):
    spec = spec_from(raw)
    return spec, render_all(spec, fixed_inputs(spec))


def setting_lines(text, prefix):
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_mig_nodes_get_typed_gpus_with_their_device_files():
    spec, files = rendered({"fakeGpus": True, "gpuType": "h100", "nodes": [
        {"name": "node1", "gpus": [0, 1], "mig": "3g.40gb:1,1g.10gb:2"}]})
    dev = "/state/x/dev"
    assert setting_lines(files["gres.conf"], "NodeName") == [
        f"NodeName=node1 Name=gpu Type=1g.10gb MultipleFiles={dev}/nvidia0,{dev}/nvidia-caps/nvidia-cap21,"
        f"{dev}/nvidia-caps/nvidia-cap22",
        f"NodeName=node1 Name=gpu Type=1g.10gb MultipleFiles={dev}/nvidia0,{dev}/nvidia-caps/nvidia-cap30,"
        f"{dev}/nvidia-caps/nvidia-cap31",
        f"NodeName=node1 Name=gpu Type=1g.10gb MultipleFiles={dev}/nvidia1,{dev}/nvidia-caps/nvidia-cap156,"
        f"{dev}/nvidia-caps/nvidia-cap157",
        f"NodeName=node1 Name=gpu Type=1g.10gb MultipleFiles={dev}/nvidia1,{dev}/nvidia-caps/nvidia-cap165,"
        f"{dev}/nvidia-caps/nvidia-cap166",
        f"NodeName=node1 Name=gpu Type=3g.40gb MultipleFiles={dev}/nvidia0,{dev}/nvidia-caps/nvidia-cap12,"
        f"{dev}/nvidia-caps/nvidia-cap13",
        f"NodeName=node1 Name=gpu Type=3g.40gb MultipleFiles={dev}/nvidia1,{dev}/nvidia-caps/nvidia-cap147,"
        f"{dev}/nvidia-caps/nvidia-cap148"]
    assert setting_lines(files["slurm.conf"], "GresTypes") == ["GresTypes=gpu"]
    node_line = setting_lines(files["slurm.conf"], "NodeName=node1")[0]
    assert " Gres=gpu:1g.10gb:4,gpu:3g.40gb:2 " in node_line
    # The TaskProlog gives a job the UUIDs of its MIG devices, in Slurm's order.
    prolog = files["task_prolog.sh"]
    assert prolog.count("MIG-") == 6 and 'node1) mig="MIG-' in prolog
    assert 'echo "export CUDA_VISIBLE_DEVICES=$mapped"' in prolog


def test_shards_and_mps_are_counted_per_gpu_on_every_gpu():
    _, files = rendered({"fakeGpus": True, "nodes": [{"name": "a", "gpus": [0, 1], "shards": 4},
                                                     {"name": "b", "gpus": [2, 3]}]})
    assert setting_lines(files["gres.conf"], "NodeName=a") == [
        "NodeName=a Name=gpu File=/state/x/dev/nvidia0", "NodeName=a Name=gpu File=/state/x/dev/nvidia1",
        "NodeName=a Name=shard Count=4 File=/state/x/dev/nvidia0",
        "NodeName=a Name=shard Count=4 File=/state/x/dev/nvidia1"]
    assert setting_lines(files["slurm.conf"], "GresTypes") == ["GresTypes=gpu,shard"]
    assert " Gres=gpu:2,shard:8 " in setting_lines(files["slurm.conf"], "NodeName=a")[0]
    assert " Gres=gpu:2 " in setting_lines(files["slurm.conf"], "NodeName=b")[0]
    _, files = rendered({"fakeGpus": 2, "nodes": 2, "mps": 100})
    assert setting_lines(files["slurm.conf"], "GresTypes") == ["GresTypes=gpu,mps"]
    assert "Gres=gpu:1,mps:100 " in setting_lines(files["slurm.conf"], "NodeName=node[1-2]")[0]
    assert "NodeName=node2 Name=mps Count=100 File=/state/x/dev/nvidia1" in files["gres.conf"]
    assert "MIG" not in files["task_prolog.sh"]


def test_mig_takes_file_lines_where_the_cluster_also_shares_gpus():
    spec, files = rendered({"fakeGpus": True, "nodes": [{"name": "a", "gpus": [0], "mig": "7g.80gb"},
                                                        {"name": "b", "gpus": [1], "shards": 2}]})
    assert "NodeName=a Name=gpu Type=7g.80gb File=/state/x/dev/nvidia-caps/nvidia-cap3" in files["gres.conf"]
    assert "MultipleFiles" not in files["gres.conf"]
    # The local backend's per-node gres.conf says the same for its node.
    per_node = gres_per_node(spec, fixed_inputs(spec))
    assert "Type=7g.80gb File=/state/x/dev/nvidia-caps/nvidia-cap3" in per_node["a"]


def test_clusters_without_sharing_render_as_before():
    _, files = rendered({"fakeGpus": 4, "nodes": 2, "gpuType": "h100"})
    assert setting_lines(files["gres.conf"], "NodeName=node1") == [
        "NodeName=node1 Name=gpu Type=h100 File=/state/x/dev/nvidia0",
        "NodeName=node1 Name=gpu Type=h100 File=/state/x/dev/nvidia1"]
    assert setting_lines(files["slurm.conf"], "GresTypes") == ["GresTypes=gpu"]
    assert " Gres=gpu:h100:2 " in setting_lines(files["slurm.conf"], "NodeName=")[0]


def test_the_task_prolog_gives_mig_jobs_their_uuids_once(tmp_path):
    from tests.unit.test_render_task_prolog import prolog_for, run_prolog
    spec = spec_from({"name": "m", "fakeGpus": True, "nodes": [
        {"name": "node1", "gpus": [0, 1], "mig": "3g.40gb:1,1g.10gb:2"}, {"name": "node2", "gpus": [2]}]})
    fake = fakegpus_data(spec)
    prolog = prolog_for(tmp_path, spec)  # without device cgroups: physical ids elsewhere
    # Slurm's index 4 on node1: the first 3g.40gb (1g.10gb x4 come first), GPU 0's.
    want = fake["node1"]["mig"]["0"][-1]
    assert want["profile"] == "3g.40gb"
    got = run_prolog(prolog, SLURMD_NODENAME="node1", SLURM_JOB_ID="1", SLURM_STEP_GPUS="4")
    assert got["CUDA_VISIBLE_DEVICES"] == want["uuid"]
    both = run_prolog(prolog, SLURMD_NODENAME="node1", SLURM_JOB_ID="1", SLURM_STEP_GPUS="0,5")
    assert both["CUDA_VISIBLE_DEVICES"] == ",".join([fake["node1"]["mig"]["0"][0]["uuid"],
                                                     fake["node1"]["mig"]["1"][-1]["uuid"]])
    # A node without MIG keeps the physical id mapping.
    assert run_prolog(prolog, SLURMD_NODENAME="node2", SLURM_JOB_ID="1", SLURM_STEP_GPUS="0")[
        "CUDA_VISIBLE_DEVICES"] == "2"


def fakegpus_data(spec):
    import json

    from provisioner.cluster.services.fakegpus import render_fake_gpus
    return json.loads(render_fake_gpus(spec))["nodes"]
