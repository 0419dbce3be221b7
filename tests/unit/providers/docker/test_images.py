"""Container options on the docker backend, without an engine (providers/docker/images.py):
the image names the host side unpacks, the paths it rewrites, and when exec's prefix starts
Python."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provisioner.providers.docker import images
from provisioner.providers.docker.exec_runner import DockerExecRunner


def test_name_file_escapes_what_a_file_name_cannot_hold():
    assert images.name_file("simcluster/node:0.1.0") == "simcluster%2Fnode%3A0.1.0"
    assert images.name_file("a_b-c.d") == "a_b-c.d"


def test_images_named_in_options_and_in_the_batch_script(tmp_path):
    argv = ["docker", "exec", "ctl", "srun", "--container-image=dockerd://debian:bookworm", "--container-image",
            "dockerd://a/b:1", "--container-image=/shared/x.sqsh", "hostname"]
    assert images.images_named(argv, tmp_path, "/shared") == ["debian:bookworm", "a/b:1"]
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --container-image=dockerd://img:2\n"
                                     "srun --container-image dockerd://img:3 true\n")
    argv = ["docker", "exec", "ctl", "sbatch", "-N2", "/shared/job.sh"]
    assert images.images_named(argv, tmp_path, "/shared") == ["img:2", "img:3"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "rel.sh").write_text("srun --container-image=dockerd://img:4 true\n")
    argv = ["docker", "exec", "-i", "-w", "/shared/sub", "ctl", "sbatch", "--wait", "rel.sh"]
    assert images.images_named(argv, tmp_path, "/shared") == ["img:4"]
    assert images.images_named(["sbatch", "/elsewhere/job.sh"], tmp_path, "/shared") == []


def test_host_paths_in_container_options_become_the_nodes():
    host = "/home/u/.local/state/simcluster/c/shared"
    argv = ["srun", f"--container-image={host}/img.sqsh", f"--container-mounts={host}/d:/d,{host}:/s:ro",
            f"{host}/script.sh", f"--container-image={host}x/img.sqsh"]
    assert images.to_cluster_paths(argv, Path(host), "/shared") == [
        "srun", "--container-image=/shared/img.sqsh", "--container-mounts=/shared/d:/d,/shared:/s:ro",
        f"{host}/script.sh", f"--container-image={host}x/img.sqsh"]


def test_exec_prefix_starts_python_only_for_container_options_and_sbatch(tmp_path):
    prefix = DockerExecRunner("ctl", (str(tmp_path), "/shared")).exec_prefix("/shared", interactive=False)
    assert DockerExecRunner("node1").exec_prefix(None, False) == ["docker", "exec", "-i", "node1"]
    # The shell script's choice, with `echo` standing in for Python and for docker.
    script, args = prefix[2], ["echo" if a == "docker" else a for a in prefix[4:]]
    for cmd, python in ((["sinfo"], False), (["srun", "--container-image=x.sqsh", "true"], True),
                        (["sbatch", "job.sh"], True), (["squeue", "--me"], False)):
        out = subprocess.run(["sh", "-c", script.replace('"$0" -m', "echo PY"), "py", *args, *cmd],
                             capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
        assert out.startswith("PY") == python, (cmd, out)
