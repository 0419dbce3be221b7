"""basic.container: pyxis's container options work across nodes (docs/containers.md).

The check makes its own small squashfs image (bash and a few coreutils of the machine that
runs verify, with their libraries, and a token file that only that image has), so it needs
no registry, no docker engine and no network: only mksquashfs (`make setup-containers`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import List

from provisioner.verify.basic import MEM, lines_with, partition_line, training_partition
from provisioner.verify.context import VerifyContext, render_template
from provisioner.verify.jobs import JobError
from provisioner.verify.outcome import CheckFailed, CheckSkipped, Outcome

# The programs the check's job runs inside the container (sh and tr: the cluster's TaskProlog runs there too).
PROGRAMS = ("bash", "sh", "cat", "id", "ls", "mkdir", "sleep", "tr", "true")
MARKER = "etc/simcluster-verify"
# The rest of glibc beside libc.so.6: what a real image has and the driver's libraries
# (libcuda, nvidia-smi), bound into containers on GPU nodes, load.
GLIBC_EXTRA = ("libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1")


def _libraries(binary: str) -> List[str]:
    """The shared libraries ``binary`` loads (ldd's paths, the dynamic loader included)."""
    out = subprocess.run(["ldd", binary], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    libs = []
    for line in out.splitlines():
        words = line.split()
        path = words[2] if len(words) > 2 and words[1] == "=>" else words[0] if words else ""
        if path.startswith("/"):
            libs.append(path)
    return libs


def make_probe_image(dest: Path, token: str) -> Path:
    """A squashfs image at ``dest``: PROGRAMS with their libraries, /etc/simcluster-verify
    holding ``token``. A few MB, uncompressed, made in about 0.1 s."""
    with tempfile.TemporaryDirectory(prefix="simcluster-probe-") as tmp:
        root = Path(tmp) / "root"
        for d in ("usr/bin", "etc", "tmp", "proc", "dev", "sys", "mnt"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "bin").symlink_to("usr/bin")
        for name in PROGRAMS:
            path = shutil.which(name, path="/usr/bin:/bin")
            if path is None:
                raise CheckSkipped(f"{name} is not installed on this machine (the check's image is made from it)")
            shutil.copy2(Path(path).resolve(), root / "usr/bin" / name)
            for lib in _libraries(path):
                target = root / lib.lstrip("/")
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(Path(lib).resolve(), target)
        libc = next((root / lib.lstrip("/") for name in PROGRAMS[:1] for lib in _libraries(shutil.which(name))
                     if Path(lib).name == "libc.so.6"), None)
        for extra in GLIBC_EXTRA if libc is not None else ():
            host = Path("/") / libc.parent.relative_to(root) / extra
            if host.exists() and not (libc.parent / extra).exists():
                shutil.copy2(host.resolve(), libc.parent / extra)
        (root / MARKER).write_text(token + "\n")
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        (root / "etc/group").write_text("root:x:0:\n")
        (root / "tmp").chmod(0o1777)
        # Uncompressed (-noI -noD -noF -noX): a 3 MB image for one job; compressing it is
        # 0.3-0.5 s of CPU on the check's critical path and saves nothing that matters.
        proc = subprocess.run(["mksquashfs", str(root), str(dest), "-noappend", "-quiet", "-no-progress",
                               "-all-root", "-noI", "-noD", "-noF", "-noX"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise CheckFailed(f"mksquashfs failed: {proc.stdout.strip()[-300:]}")
    return dest


def container_options(ctx: VerifyContext) -> bool:
    """Whether the cluster's srun has the container options (its plugstack loads the plugin)."""
    proc = ctx.client.run(["srun", "--help"], timeout=30)
    return "--container-image" in proc.stdout + proc.stderr


def check_container(ctx: VerifyContext) -> Outcome:
    """Two nodes run one step each in a container made from a squashfs image: the image's own
    file (its token), a read-only and a writable mount, the workdir, uid 0 with remap-root,
    each task's rank; a second step of the job reuses the named container and finds what the
    first step wrote in it."""
    check = "basic.container"
    chosen = training_partition(ctx.spec, 2)
    if chosen is None:
        raise CheckSkipped("needs 2 nodes in one partition")
    if not container_options(ctx):
        raise CheckSkipped("this cluster's srun has no --container-image (`simcluster status` says why; "
                           "docs/containers.md#where-it-works)")
    if shutil.which("mksquashfs") is None:
        raise CheckSkipped("mksquashfs is not installed here (make setup-containers installs squashfs-tools)")
    part, members = chosen
    nodes = members[:2]
    workdir = ctx.check_dir(check)
    token, data_token = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory(prefix="simcluster-verify-") as tmp:
        staged = Path(tmp) / "image"
        staged.mkdir()
        make_probe_image(staged / "probe.sqsh", token)
        (staged / "data").mkdir()
        (staged / "data" / "in").write_text(data_token + "\n")
        (staged / "out").mkdir()
        (staged / "out").chmod(0o777)
        ctx.files.copy_tree(staged, workdir / "image")
    base = workdir / "image"
    script = render_template("basic_container.sbatch", {
        "TIME": ctx.time_minutes(ctx.limit(120)), "MEM": MEM, "PARTITION_LINE": partition_line(part),
        "IMAGE": ctx.cluster_path(base / "probe.sqsh"), "DATA": ctx.cluster_path(base / "data"),
        "OUT": ctx.cluster_path(base / "out")})
    job = ctx.submit(check, script, [f"--nodelist={','.join(nodes)}"], name="container.sh")
    try:
        ctx.wait_ok(job, ctx.limit(120))
    except JobError as exc:
        raise CheckFailed(str(exc), output=job.output)
    text = ctx.read(job.output)
    first, second = lines_with(text, "CONT"), lines_with(text, "NAMED")
    problems = []
    if sorted(r.get("node", "") for r in first) != sorted(nodes):
        problems.append(f"the first step ran in a container on {[r.get('node') for r in first]}, expected {nodes}")
    if sorted(r.get("rank", "") for r in first) != ["0", "1"]:
        problems.append(f"ranks {[r.get('rank') for r in first]}, expected 0 and 1")
    for r in first:
        where = f"{r.get('node')}: "
        if r.get("image") != token:
            problems.append(where + "the task did not see the image's own files (not in the container)")
        if r.get("pwd") != "/mnt/out":
            problems.append(where + f"--container-workdir=/mnt/out gave {r.get('pwd')}")
        if r.get("data") != data_token:
            problems.append(where + "--container-mounts: /mnt/data does not show the mounted directory")
        if r.get("readonly") != "yes":
            problems.append(where + "a ':ro' mount was writable")
        if r.get("uid") != "0":
            problems.append(where + f"--container-remap-root gave uid {r.get('uid')}, expected 0")
        if (ctx.read(base / "out" / f"from-{r.get('node')}").strip() != r.get("node")):
            problems.append(where + "a file written to the writable mount /mnt/out did not reach the host")
    if sorted(r.get("node", "") for r in second) != sorted(nodes) or any(
            r.get("kept") != r.get("node") or r.get("image") != token for r in second):
        problems.append(f"the named container's second step did not find the first step's file: {second}")
    if problems:
        raise CheckFailed("; ".join(problems[:4]), output=job.output)
    return Outcome(f"srun --container-image (a squashfs image) on {' and '.join(nodes)}: image files, "
                   "mounts (ro and rw), workdir, remap-root and a named container reused by a second step")
