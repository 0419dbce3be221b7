"""verify's backend targets without a cluster: command wrapping, paths, GPU ids, module probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import UsageError
from provisioner.verify.jobs import DockerSlurmClient, SlurmClient
from provisioner.verify.targets import DockerTarget, _parse_probe, container_gpu_ids, physical_gpu_ids


def spec() -> ClusterSpec:
    ns = (NodeSpec("node1", (6,), 2, 1000), NodeSpec("node2", (7, 3), 2, 1000), NodeSpec("node3", (), 2, 1000))
    return ClusterSpec("t", "docker", ns, (PartitionSpec("main", ("node1", "node2", "node3"), default=True),))


def test_gpu_ids_local_are_physical_docker_are_numbered_from_zero():
    s = spec()
    assert physical_gpu_ids(s, "node1") == "6"
    assert physical_gpu_ids(s, "node2") == "7,3"
    assert physical_gpu_ids(s, "node2", 1) == "7"
    assert physical_gpu_ids(s, "node3") == ""
    assert container_gpu_ids(s, "node1") == "0"
    assert container_gpu_ids(s, "node2") == "0,1"
    assert container_gpu_ids(s, "node2", 1) == "0"
    assert container_gpu_ids(s, "node3") == ""


def test_docker_client_runs_commands_in_the_controller_with_only_the_given_env():
    client = DockerSlurmClient("simcluster-x-ctl")
    argv = client.exec_argv(["sbatch", "--parsable", "/shared/verify/a/job.sh"], env={"B": "2", "A": "1"},
                            cwd="/shared/verify/a")
    assert argv == ["docker", "exec", "-w", "/shared/verify/a", "-e", "A=1", "-e", "B=2", "simcluster-x-ctl",
                    "sbatch", "--parsable", "/shared/verify/a/job.sh"]
    assert client.exec_argv(["squeue"]) == ["docker", "exec", "simcluster-x-ctl", "squeue"]
    # the host's SLURM_* / PATH never leak into the container
    assert client.env == {}
    assert client.poll_s > SlurmClient.poll_s


def test_local_client_drops_the_callers_job_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SBATCH_PARTITION", "x")
    client = SlurmClient(tmp_path / "slurm.conf")
    assert client.env["SLURM_CONF"] == str(tmp_path / "slurm.conf")
    assert "SLURM_JOB_ID" not in client.env and "SBATCH_PARTITION" not in client.env


def test_docker_target_maps_shared_dir_paths_and_refuses_others(tmp_path):
    target = object.__new__(DockerTarget)  # no docker here: set what __init__ would read from labels
    target.runs_root, target.shared_mount = tmp_path / "shared", "/shared"
    assert target.cluster_path(tmp_path / "shared" / "verify" / "r1" / "job.sh") == "/shared/verify/r1/job.sh"
    assert target.cluster_path(tmp_path / "shared") == "/shared"
    with pytest.raises(UsageError):
        target.cluster_path(Path("/etc/passwd"))


def test_module_probe_output_parsing():
    assert _parse_probe('{"torch": true, "deepspeed": false}\n', ["torch", "deepspeed"]) == \
        {"torch": True, "deepspeed": False}
    # a python that crashed or printed nothing: treat every module as missing (SKIP, not a crash)
    assert _parse_probe("", ["torch"]) == {"torch": False}
    assert _parse_probe("Traceback ...", ["torch"]) == {"torch": False}


def test_docker_run_args_gpu_requests_and_the_spec_label(tmp_path):
    """Real GPUs become a device request per node container (only its own GPUs); fake GPUs an
    env var the entrypoint turns into device files; the controller carries the whole spec."""
    import json

    from provisioner.dockercmd import LABEL_SPEC_JSON
    from provisioner.paths import ClusterLayout
    from provisioner.providers.docker import DockerProvider

    s = spec()
    layout = ClusterLayout(tmp_path / "t")
    args = DockerProvider()._run_args(s, layout, "img:1", "node2")
    assert args[args.index("--gpus") + 1] == '"device=7,3"'
    assert "--privileged" not in args and args[-2:] == ["img:1", "node"]
    assert not any(a.startswith(LABEL_SPEC_JSON) for a in args)

    fake = ClusterSpec(s.name, s.backend, s.nodes, s.partitions, fake_gpus=True)
    args = DockerProvider(privileged=True)._run_args(fake, layout, "img:1", "node2")
    assert "--gpus" not in args and "SIMCLUSTER_FAKE_GPUS=7 3" in args and "--privileged" in args

    ctl = DockerProvider()._run_args(s, layout, "img:1", None)
    label = next(a for a in ctl if a.startswith(LABEL_SPEC_JSON + "="))
    assert ClusterSpec.from_dict(json.loads(label.split("=", 1)[1])) == s
    assert "--gpus" not in ctl and ctl[-1] == "controller"
