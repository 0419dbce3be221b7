"""pyxis's container options on a 2-node local cluster (as root, plugin built).

A squashfs image made by `simcluster image import dockerd://...` (or, where this machine
has no docker image, by mksquashfs from a directory of this host's programs); one batch job
whose steps run in containers on both nodes: the mounts, the workdir, a named container a
later step reuses, remap-root, a read-only mount, a fresh unnamed container; after the job,
nothing of the containers is mounted on the nodes and their directories are gone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from provisioner.cluster.services import containers
from provisioner.config.versions import host_slurm_version
from tests.conftest import daemons_under, run_cli
from tests.integration.test_local_cluster import wait_job, write_job

_UNAVAILABLE = containers.unavailable_reason(True, True, host_slurm_version())
# Every module of container jobs on the local backend (test_oci, test_enroot_example) runs
# only where this host can: as root, the plugin built for its Slurm, mksquashfs installed.
CONTAINER_MARKS = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="container jobs need the local backend run as root"),
    pytest.mark.skipif(bool(_UNAVAILABLE), reason=_UNAVAILABLE),
    pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="no mksquashfs: make setup-containers"),
]
pytestmark = CONTAINER_MARKS

DOCKER_IMAGES = ("simcluster/base:bookworm", "simcluster/node:0.1.0")
PROGRAMS = ("sh", "bash", "cat", "ls", "id", "touch", "stat", "hostname", "grep")



# What srun says when a step starts while the last one's cleanup still holds the node (a
# loaded host): Slurm's progress lines, not the job's output.
STEP_RETRY = re.compile(r"^srun: (Job \d+ step creation (temporarily|still) disabled, retrying.*|Step created for job \d+)\n",
                        re.M)


def without_step_retries(text: str) -> str:
    return STEP_RETRY.sub("", text)

def _docker_image() -> str:
    """An image of this machine's docker engine to import, or "" where there is none."""
    if shutil.which("docker") is None:
        return ""
    for image in DOCKER_IMAGES:
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0:
            return image
    return ""


def _tiny_rootfs(root: Path) -> None:
    """A root file system of a few of this host's programs and the libraries they load."""
    libs = set()
    for prog in PROGRAMS:
        path = shutil.which(prog)
        dest = root / "usr" / "bin" / prog
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        libs.update(tok for tok in out.split() if tok.startswith("/"))
    for lib in libs:
        dest = root / lib.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), dest)
    (root / "bin").symlink_to("usr/bin")
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text('ID=simcluster-tiny\nPRETTY_NAME="simcluster tiny"\n')
    for d in ("tmp", "proc", "dev", "sys"):
        (root / d).mkdir()


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """The .sqsh file the jobs run in."""
    out = tmp_path_factory.mktemp("image") / "image.sqsh"
    docker_image = _docker_image()
    if docker_image:
        proc = run_cli(["image", "import", f"dockerd://{docker_image}", "-o", str(out)], out.parent,
                       check=True, timeout=600)
        assert f"imported dockerd://{docker_image} to {out}" in proc.stdout
    else:
        root = out.parent / "rootfs"
        _tiny_rootfs(root)
        subprocess.run(["mksquashfs", str(root), str(out), "-noappend", "-quiet", "-no-progress"], check=True)
    return out


def _container_mounts(c) -> list:
    """Lines of the cluster's daemons' mount tables that name its containers directory."""
    needle = str(c.root / containers.CONTAINERS_DIR)
    lines = []
    for entry in daemons_under(c.root):
        pid = entry.split(":", 1)[0]
        try:
            lines += [ln for ln in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if needle in ln]
        except OSError:
            continue
    return lines


def test_steps_run_in_containers_on_both_nodes(make_cluster, image, tmp_path):
    c = make_cluster("--nodes", "2")
    assert "PlugStackConfig=" in c.slurm_conf.read_text()
    assert "container options: srun --container-image=FILE.sqsh" in c.up_output.stdout
    data = tmp_path / "data"
    data.mkdir()
    (data / "from-host.txt").write_text("hello\n")
    img = f"--container-image={image}"
    script = write_job(tmp_path / "cont.sh", textwrap.dedent(f"""\
        set -u
        echo "== fs"
        srun -N2 --ntasks-per-node=1 {img} --container-mounts={data}:/data --container-workdir=/data \\
            bash -c 'echo "$(hostname) $(stat -f -c %T /) $(pwd) $(ls)"'
        echo "== named"
        srun -N2 --ntasks-per-node=1 {img} --container-name=keep bash -c 'echo "written by $SLURM_NODEID" > /kept'
        srun -N2 --ntasks-per-node=1 {img} --container-name=keep bash -c 'echo "$(hostname) $(cat /kept)"'
        echo "== unnamed"
        srun -N1 {img} bash -c 'cat /kept 2>/dev/null || echo fresh'
        echo "== remap"
        srun -N2 --ntasks-per-node=1 {img} --container-remap-root id -u
        echo "== ro"
        srun -N1 {img} --container-mounts={data}:/data:ro touch /data/new 2>/dev/null || echo read-only
        echo "== end"
        """))
    # srun's own messages (e.g. a step waiting for the previous one's resources) go to err.txt.
    job = c.run(["sbatch", "--parsable", "-N2", "-o", str(tmp_path / "out.txt"), "-e", str(tmp_path / "err.txt"),
                 str(script)]).stdout.strip()
    assert wait_job(c, job, timeout=300) == "COMPLETED", (tmp_path / "out.txt").read_text()
    out = (tmp_path / "out.txt").read_text()
    sections = dict(part.split("\n", 1) for part in out.split("== ")[1:])
    fs = sorted(sections["fs"].split("\n")[:2])
    assert fs == ["node1 overlayfs /data from-host.txt", "node2 overlayfs /data from-host.txt"], out
    assert sorted(sections["named"].split()) == sorted("node1 written by 0 node2 written by 1".split()), out
    assert sections["unnamed"].strip() == "fresh", out
    assert sections["remap"].split() == ["0", "0"], out
    assert sections["ro"].strip() == "read-only", out
    assert not (data / "new").exists()
    # The named containers go in the job's epilog, after the job is COMPLETED.
    _assert_named_containers_removed(c)


def test_a_named_container_is_reused_by_its_name_alone(make_cluster, image, tmp_path):
    """pyxis's pattern: `srun --container-image=IMG --container-name=c1 setup`, then `srun
    --container-name=c1 cmd` runs cmd in c1 with setup's changes. A name that does not exist
    (in the job, on that node) fails the step with one clear line and never runs it on the
    host; each node keeps its own containers (a step on node2 alone finds node2's); pyxis's
    name flags (create, exec, no_exec, auto); a step that joins a running one shares its
    file system; the Epilog removes them all at the job's end."""
    c = make_cluster("--nodes", "2")
    shared = tmp_path / "shared"
    shared.mkdir()
    on_host = tmp_path / "ran-on-the-host"
    img = f"--container-image={image}"
    script = write_job(tmp_path / "named.sh", f"""\
        set -u
        echo "== reuse"
        srun -N1 -w node1 {img} --container-name=c1 sh -c 'echo hi > /c1-marker'
        srun -N1 -w node1 --container-name=c1 cat /c1-marker
        echo "== nope"
        srun -N1 -w node1 --container-name=nope touch {on_host}
        echo "rc=$?"
        echo "== other-node"
        srun -N1 -w node2 --container-name=c1 cat /c1-marker
        echo "rc=$?"
        echo "== per-node"
        srun -N2 --ntasks-per-node=1 {img} --container-name=c2 sh -c 'hostname > /who'
        srun -N1 -w node2 --container-name=c2 cat /who
        srun -N1 -w node1 --container-name=c2 cat /who
        echo "== create"
        srun -N1 -w node1 {img} --container-name=c1:create true
        echo "rc=$?"
        echo "== exec"
        srun -N1 -w node1 --container-name=c1:exec true
        echo "rc=$?"
        echo "== flags"
        srun -N1 -w node1 --container-name=c1:no_exec cat /c1-marker
        srun -N1 -w node1 {img} --container-name=c3:create sh -c 'echo made > /c3'
        srun -N1 -w node1 --container-name=c3:auto cat /c3
        echo "== running"
        mkfifo {shared}/go
        srun --overlap -N1 -w node1 --container-name=c1 --container-mounts={shared}:/out \\
            sh -c 'touch /out/started; read x < /out/go; cat /c1-exec' &
        for i in $(seq 3000); do [ -e {shared}/started ] && break; sleep 0.1; done
        srun --overlap -N1 -w node1 --container-name=c1:exec sh -c 'echo from-exec > /c1-exec'
        timeout 120 sh -c 'echo go > {shared}/go'  # no reader: the first step failed
        wait
        echo "== after"
        srun -N1 -w node1 --container-name=c1 cat /c1-exec
        echo "== end"
        """)
    out_file = tmp_path / "out.txt"  # stdout and stderr: what the user reads
    job = c.run(["sbatch", "--parsable", "-N2", "-o", str(out_file), str(script)]).stdout.strip()
    assert wait_job(c, job, timeout=300) == "COMPLETED", out_file.read_text()
    out = without_step_retries(out_file.read_text())
    sections = dict(part.split("\n", 1) for part in out.split("== ")[1:])
    assert sections["reuse"].strip() == "hi", out
    assert ("--container-name=nope: no container named nope in this job on this node "
            "(a step with --container-image=IMAGE --container-name=nope makes it), and no --container-image"
            in sections["nope"]), out
    assert "rc=0" not in sections["nope"] and "rc=" in sections["nope"], out
    assert not on_host.exists(), "the step without a container ran on the host"
    assert "no container named c1" in sections["other-node"] and "rc=0" not in sections["other-node"], out
    assert [ln for ln in sections["per-node"].splitlines() if ln.startswith("node")] == ["node2", "node1"], out
    assert "--container-name=c1:create: a container named c1 exists already" in sections["create"], out
    assert "rc=0" not in sections["create"], out
    assert "--container-name=c1:exec: no step of this job runs in a container named c1" in sections["exec"], out
    assert "rc=0" not in sections["exec"], out
    assert sections["flags"].split() == ["hi", "made"], out
    assert sections["running"].strip() == "from-exec", out
    assert sections["after"].strip() == "from-exec", out
    # The job's named containers go in its Epilog, after the job is COMPLETED.
    _assert_named_containers_removed(c)


def test_each_step_has_its_own_options_in_a_named_container(make_cluster, image, tmp_path):
    """The options other than the image are each step's own, in a reused container as in a
    new one (pyxis starts the container anew per step): remap-root, read-only, mounts and
    workdir; a bad name flag is one line from srun."""
    c = make_cluster("--nodes", "1")
    data = tmp_path / "data"
    data.mkdir()
    (data / "from-host.txt").write_text("hello\n")
    script = write_job(tmp_path / "options.sh", f"""\
        srun --container-image={image} --container-name=r --container-remap-root sh -c 'id -u > /made'
        srun --container-name=r --no-container-remap-root --container-readonly \\
            sh -c 'cat /made; touch /new 2>/dev/null || echo read-only'
        srun --container-name=r --container-mounts={data}:/data --container-workdir=/data \\
            sh -c 'echo "$(pwd) $(cat from-host.txt)"; touch /new && echo writable'
        """)
    out = tmp_path / "out.txt"
    job = c.run(["sbatch", "--parsable", "-N1", "-o", str(out), "-e", str(tmp_path / "err.txt"),
                 str(script)]).stdout.strip()
    assert wait_job(c, job, timeout=300) == "COMPLETED", (tmp_path / "err.txt").read_text()
    assert out.read_text().splitlines() == ["0", "read-only", "/data hello", "writable"], out.read_text()
    # salloc's options reach its sruns, and an srun's own name wins over salloc's.
    proc = c.run(["salloc", "-N1", f"--container-image={image}", "--container-name=a", "bash", "-c",
                  "srun sh -c 'echo a > /which'; srun --container-name=b sh -c 'cat /which 2>/dev/null || echo fresh';"
                  "srun cat /which"], timeout=300, cwd=tmp_path)
    assert proc.stdout.split() == ["fresh", "a"], proc.stdout + proc.stderr
    bad = c.run(["srun", f"--container-image={image}", "--container-name=x:sometimes", "true"], check=False)
    assert bad.returncode != 0
    assert "--container-name=x:sometimes: the flag after ':' must be auto, create, exec or no_exec" in bad.stderr


def test_a_missing_image_is_one_line_from_srun(make_cluster, tmp_path):
    c = make_cluster("--nodes", "1")
    proc = c.run(["srun", f"--container-image={tmp_path}/missing.sqsh", "true"], check=False)
    assert proc.returncode != 0
    assert f"--container-image={tmp_path}/missing.sqsh: no such squashfs file" in proc.stderr


def test_the_image_environment_wins_except_container_env(make_cluster, tmp_path):
    root = tmp_path / "rootfs"
    _tiny_rootfs(root)
    (root / "etc" / "environment").write_text(containers.environment_file(["FOO=from-image", "BAR=from-image"]))
    image = tmp_path / "env.sqsh"
    subprocess.run(["mksquashfs", str(root), str(image), "-noappend", "-quiet", "-no-progress"], check=True)
    c = make_cluster("--nodes", "1")
    env = {**c.env(), "FOO": "from-host", "BAR": "from-host"}
    proc = subprocess.run(["srun", f"--container-image={image}", "--container-env=BAR", "bash", "-c",
                           'echo "$FOO $BAR"; grep ^ID= /etc/os-release'],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["from-image", "from-host", "ID=simcluster-tiny"]


def test_sbatch_runs_the_script_in_the_container_salloc_its_steps(make_cluster, image, tmp_path):
    """pyxis's semantics: `sbatch --container-image` runs the batch script itself in the
    container (so no srun inside it); `salloc --container-image` puts each srun of the
    allocation in the container while salloc's own command runs here."""
    c = make_cluster("--nodes", "2")
    data = tmp_path / "data"
    data.mkdir()
    (data / "from-host.txt").write_text("hello\n")
    script = write_job(tmp_path / "batch.sh", """\
        echo "batch $(stat -f -c %T /) $(pwd) $(ls)"
        """)
    job = c.run(["sbatch", "--parsable", "-N2", "-o", str(tmp_path / "out.txt"), "-e", str(tmp_path / "err.txt"),
                 f"--container-image={image}", "--no-container-mount-home", "--container-remap-root",
                 f"--container-mounts={data}:/data", "--container-workdir=/data", str(script)]).stdout.strip()
    assert wait_job(c, job, timeout=300) == "COMPLETED", (tmp_path / "err.txt").read_text()
    assert (tmp_path / "out.txt").read_text() == "batch overlayfs /data from-host.txt\n"
    proc = c.run(["salloc", "-N2", f"--container-image={image}", "bash", "-c",
                  'echo "alloc $(stat -f -c %T /)"; srun -N2 --ntasks-per-node=1 stat -f -c "step %T" /'],
                 timeout=300, cwd=tmp_path)
    assert proc.stdout.split("\n")[0] != "alloc overlayfs", proc.stdout
    assert sorted(proc.stdout.split("\n")[1:3]) == ["step overlayfs", "step overlayfs"], proc.stdout


def test_remap_root_maps_another_user_to_root(make_cluster, image, tmp_path):
    """A job of an unprivileged user (sbatch --uid, as root may): uid 0 inside with
    --container-remap-root, its own uid without."""
    c = make_cluster("--nodes", "1")
    out_dir = c.home / "nobody"  # tmp_path's parents are root's alone
    out_dir.mkdir()
    out_dir.chmod(0o777)
    for flag, expected in (("--container-remap-root", "0"), ("--no-container-remap-root", "65534")):
        out = out_dir / f"{flag}.txt"
        job = c.run(["sbatch", "--parsable", "--uid=65534", "--gid=65534", "-N1", "-D", str(out_dir), "-o", str(out),
                     f"--container-image={image}", flag, "--wrap", "id -u"]).stdout.strip()
        assert wait_job(c, job, timeout=300) == "COMPLETED", out.read_text() if out.exists() else job
        assert out.read_text().split()[-1] == expected, out.read_text()


@pytest.mark.skipif(not _docker_image(), reason="this machine's docker engine has no simcluster image (simcluster image build)")
def test_a_docker_engine_image_directly(make_cluster, tmp_path):
    """--container-image=dockerd://IMAGE: unpacked once per cluster from docker export."""
    c = make_cluster("--nodes", "2")
    data = tmp_path / "data"
    data.mkdir()
    (data / "from-host.txt").write_text("hello\n")
    proc = c.run(["srun", "-N2", "--ntasks-per-node=1", f"--container-image=dockerd://{_docker_image()}",
                  f"--container-mounts={data}:/data", "--container-workdir=/data",
                  "bash", "-c", 'echo "$(hostname) $(stat -f -c %T /) $(pwd) $(ls)"'], timeout=300, cwd=tmp_path)
    assert sorted(proc.stdout.splitlines()) == ["node1 overlayfs /data from-host.txt",
                                                "node2 overlayfs /data from-host.txt"], proc.stderr
    images = sorted(p.name for p in (c.root / containers.CONTAINERS_DIR / "images").iterdir())
    assert [p for p in images if p.startswith("dockerd-") and not p.endswith(".lock")], images
    bad = c.run(["srun", "--container-image=dockerd://simcluster-no-such-image:0", "true"], check=False)
    assert bad.returncode != 0 and "docker engine has no image simcluster-no-such-image:0" in bad.stderr


SLURM_CLIENTS = ("srun", "scontrol", "sh", "tr", "env")  # sh: the TaskProlog; env: nvidia-smi's #!
SLURM_PLUGINS = "/usr/lib/x86_64-linux-gnu/slurm-wlm"


def _slurm_client_rootfs(root: Path) -> None:
    """A tiny root file system with this host's Slurm client (srun, scontrol and the plugins
    they load: the cluster's release) and python3 (its library mounted from the host by the
    steps), the way a training image carries both."""
    _tiny_rootfs(root)
    # Slurm's commands look up its users (SlurmUser=root) by name.
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    libs = set()
    programs = [shutil.which(p) for p in SLURM_CLIENTS] + [os.path.realpath("/usr/bin/python3")]
    plugins = [str(p) for p in Path(SLURM_PLUGINS).glob("*.so")]
    for path in programs + plugins:
        dest = root / path.lstrip("/")
        if path in programs:
            dest = root / "usr" / "bin" / (Path(path).name if "python" not in path else "python3")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        libs.update(tok for tok in out.split() if tok.startswith("/") and os.path.exists(tok))
    for lib in libs:
        dest = root / lib.lstrip("/")
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(lib), dest)


@pytest.mark.skipif(not (shutil.which("srun") and Path(SLURM_PLUGINS).is_dir() and os.path.exists("/usr/bin/python3")),
                    reason="needs Debian's Slurm client and python3 on this host to make the image")
def test_slurm_clients_gpus_and_save_inside_containers(make_cluster, tmp_path):
    """A container'd batch script runs scontrol and srun inside (the node's Slurm config and
    munge socket are mounted); its sruns inherit sbatch's options and run in the same image;
    each task sees exactly its step's fake GPUs (CUDA_VISIBLE_DEVICES, simcluster's
    nvidia-smi incl. the dmon of training launchers); --container-save makes a .sqsh a later
    step runs; a docker:// image with no registry reachable is one line."""
    root = tmp_path / "rootfs"
    _slurm_client_rootfs(root)
    image = tmp_path / "slurm.sqsh"
    subprocess.run(["mksquashfs", str(root), str(image), "-noappend", "-comp", "lz4", "-quiet", "-no-progress"],
                   check=True)
    c = make_cluster("--nodes", "2", "--fake-gpus", "4")
    out = tmp_path / "out"
    out.mkdir()
    pylib = f"/usr/lib/{Path(os.path.realpath('/usr/bin/python3')).name}"
    script = write_job(tmp_path / "prelaunch.sh", """\
        echo "batch $(stat -f -c %T /)"
        echo "hosts $(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\\n' ' ')"
        srun --mpi=none --gpus-per-node=1 bash -c \\
            'echo "step $(hostname) $(stat -f -c %T /) gpus=$CUDA_VISIBLE_DEVICES $(nvidia-smi -L | grep -c ^GPU)"'
        srun -N1 -n1 nvidia-smi dmon --delay 1 --count 2 --select pumt --options DT --filename "$PWD/dmon.txt"
        """)
    job = c.run(["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--gpus-per-node=2",
                 "-o", str(tmp_path / "batch.out"), "-e", str(tmp_path / "batch.err"),
                 f"--container-image={image}", f"--container-mounts={pylib},{out}:{out}",
                 f"--container-workdir={out}", "--no-container-mount-home", str(script)]).stdout.strip()
    assert wait_job(c, job, timeout=300) == "COMPLETED", (tmp_path / "batch.err").read_text()
    lines = (tmp_path / "batch.out").read_text().splitlines()
    assert lines[:2] == ["batch overlayfs", "hosts node1 node2 "], lines
    assert sorted(lines[2:4]) == ["step node1 overlayfs gpus=0 1", "step node2 overlayfs gpus=0 1"], lines
    dmon = (out / "dmon.txt").read_text().splitlines()
    assert dmon[0].startswith("#Date") and "pwr" in dmon[0] and "fb" in dmon[0], dmon
    assert [ln.split()[2] for ln in dmon[2:]] == ["0", "1", "0", "1"], dmon  # the job's 2 GPUs, 2 samples

    saved = tmp_path / "saved.sqsh"
    c.run(["srun", "-N1", f"--container-image={image}", f"--container-save={saved}", "bash", "-c",
           "echo kept > /marker"], timeout=300, cwd=tmp_path)
    assert saved.is_file() and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    proc = c.run(["srun", "-N1", f"--container-image={saved}", "cat", "/marker"], timeout=300, cwd=tmp_path)
    assert proc.stdout == "kept\n", proc.stderr
    bad = c.run(["srun", "-N1", f"--container-image={image}", "--container-save=/nonexistent/x.sqsh", "true"],
                check=False, timeout=300, cwd=tmp_path)
    assert bad.returncode != 0 and "--container-save=/nonexistent/x.sqsh: /nonexistent is not a directory" in bad.stderr

    if _docker_image():  # a docker engine answers here
        bad = c.run(["srun", "--container-image=docker://nosuch.invalid#simcluster/x:1", "true"], check=False)
        assert bad.returncode != 0, bad.stdout
        assert "docker pull nosuch.invalid/simcluster/x:1 failed (" in bad.stderr, bad.stderr


def _assert_named_containers_removed(c) -> None:
    """The job's Epilog removes its named containers once the job is COMPLETED: wait for it
    (up to a minute), then nothing of them is left, data or mount."""
    deadline = time.monotonic() + 60
    data_dir = c.root / containers.CONTAINERS_DIR / "data"
    while any(data_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not list(data_dir.iterdir())
    assert _container_mounts(c) == []
