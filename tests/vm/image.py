"""Debian disk images for the throwaway test VMs, built offline from Debian's packages only.

An image is made the way a Debian install is: ``debootstrap --variant=minbase`` of a suite
from Debian's archive, then, in a chroot, Debian's cloud kernel with initramfs-tools, systemd
(cgroup v2 by default), everything ``make setup`` would apt-install (APT_PACKAGES and
NODESTART_PACKAGES, read from the Makefile, so the in-VM ``make setup`` finds them present),
and what the rig needs to drive the guest: openssh-server with the rig's key for root and for
``runner`` (a non-root user with passwordless sudo, the shape of GitHub's hosted runner),
sudo, make, git, rsync. No cloud image is downloaded; nothing but deb.debian.org is fetched.

The result, in the cache directory (``$SIMCLUSTER_VM_CACHE``, else /var/cache/simcluster-vm
when writable, else ~/.cache/simcluster-vm)::

    <suite>-<recipe hash>/base.raw   ext4 root file system (sparse), the guest's /dev/vda
                          vmlinuz, initrd.img   booted directly by qemu (-kernel/-initrd)
                          id_ed25519            the key that logs in as root and runner
                          recipe.json           what the hash covers; build-seconds

The hash covers the suite, the mirror, the package lists and the text of the steps that
make the image (RECIPE_STEPS), so an image is rebuilt when (and only when) its recipe
changes. Images of other recipes (another checkout sharing the cache) stay until unused for
UNUSED_DAYS. Builds take a lock, so two sessions never build the same
image at once, and land by renaming a finished directory: a broken build leaves no image.

Building needs root (debootstrap, chroot, mkfs.ext4 -d keeping owners): run as root, or
the build runs itself through ``sudo -n``.

    python -m tests.vm.image bookworm trixie     # what `make vm-images` runs
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
SUITES = ("bookworm", "trixie")
# Cloud kernel: virtio drivers as modules, small, boots quickly; it has no 9p (files travel by ssh).
KERNEL_PACKAGE = "linux-image-cloud-amd64"
# What the guest needs to boot and be driven, on top of the project's own packages.
GUEST_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "udev", "kmod", "iproute2", "iputils-ping", "procps",
    "openssh-server", "sudo", "make", "git", "rsync", "ca-certificates", "python3",
    # A Debian install's login sessions: pam_systemd registers them with logind and starts the
    # user's systemd manager (user@UID.service, which `loginctl enable-linger` keeps running).
    "libpam-systemd",
    "initramfs-tools", KERNEL_PACKAGE, "less", "psmisc", "util-linux",
]
# Per suite, on top: bookworm's image also hosts the docker backend's case (Debian's docker.io,
# and apparmor, which a stock install of docker.io brings (a Recommends): the engine confines
# unprivileged containers with its docker-default profile through apparmor_parser;
# its engine disabled at boot: the case starts it, the other cases never see it).
SUITE_PACKAGES = {"bookworm": ["docker.io", "apparmor"], "trixie": []}
# virtio_blk carries /dev/vda; ext4 is built into the cloud kernel.
INITRAMFS_MODULES = ["virtio_pci", "virtio_blk"]
# Room for `make setup`'s venv, clusters, logs; the file is sparse, unused space costs nothing.
IMAGE_FREE_BYTES = 3 * 1024 ** 3
RUNNER_USER = "runner"
# qemu's MAC for the first NIC given none (machine.py's user-network NIC).
USER_NIC_MAC = "52:54:00:12:34:56"


def cache_root() -> Path:
    """Where images live: $SIMCLUSTER_VM_CACHE, /var/cache/simcluster-vm, or ~/.cache/simcluster-vm."""
    env = os.environ.get("SIMCLUSTER_VM_CACHE")
    if env:
        return Path(env)
    system = Path("/var/cache/simcluster-vm")
    if os.access(system if system.exists() else system.parent, os.W_OK):
        return system
    return Path.home() / ".cache" / "simcluster-vm"


def project_apt_packages() -> List[str]:
    """APT_PACKAGES and NODESTART_PACKAGES as the Makefile has them (one source of truth)."""
    proc = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(REPO),
         "--eval", "print-vm-packages: ; @echo $(APT_PACKAGES) $(NODESTART_PACKAGES)",
         "print-vm-packages"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout.split():
        raise RuntimeError(f"could not read APT_PACKAGES from {REPO}/Makefile: {proc.stderr.strip()}")
    return proc.stdout.split()


@dataclass(frozen=True)
class Image:
    """A built image: its directory and the files qemu and ssh need."""

    suite: str
    path: Path

    @property
    def disk(self) -> Path:
        return self.path / "base.raw"

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.img"

    @property
    def key(self) -> Path:
        return self.path / "id_ed25519"

    def recipe(self) -> Dict:
        return json.loads((self.path / "recipe.json").read_text())


def recipe(suite: str) -> Dict:
    """Everything an image is made from; its hash names the image."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}: the rig builds {', '.join(SUITES)}")
    return {
        "suite": suite,
        "mirror": MIRROR,
        "guest_packages": GUEST_PACKAGES + SUITE_PACKAGES[suite],
        "project_packages": project_apt_packages(),
        "initramfs_modules": INITRAMFS_MODULES,
        # the steps that make the image (not the cache handling around them)
        "builder": hashlib.sha256("".join(inspect.getsource(f) for f in RECIPE_STEPS).encode()).hexdigest(),
    }


def recipe_hash(rec: Dict) -> str:
    return hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()[:12]


def cached_image(suite: str, root: Optional[Path] = None) -> Optional[Image]:
    """The finished image for the current recipe, or None when it has to be built."""
    path = (root or cache_root()) / f"{suite}-{recipe_hash(recipe(suite))}"
    if not (path / "recipe.json").is_file():
        return None
    _mark_used(path)
    return Image(suite, path)


def _mark_used(path: Path) -> None:
    try:
        (path / "last-used").touch()
    except OSError:
        pass  # a read-only cache still serves its images


# Images of other recipes (another checkout or branch sharing the cache) are removed only
# once unused this long: two checkouts with different recipes do not rebuild each other's.
UNUSED_DAYS = 7


def _run(cmd: List[str], log, **kwargs) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError(f"image build step failed (exit {proc.returncode}): {' '.join(cmd)}")


def _chroot(root: Path, script: str, log) -> None:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
           "LC_ALL": "C.UTF-8", "HOME": "/root"}
    _run(["chroot", str(root), "/bin/sh", "-ec", script], log, env=env)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _configure(root: Path, suite: str, pubkey: str) -> None:
    """The guest's own files: network, name, users and their key, what must not start."""
    _write(root / "etc/hostname", "simvm\n")
    _write(root / "etc/hosts", "127.0.0.1 localhost\n127.0.1.1 simvm\n::1 localhost ip6-localhost\n")
    # qemu's user network, its fixed addresses (no DHCP round under TCG): guest 10.0.2.15,
    # gateway 10.0.2.2, DNS 10.0.2.3. The NIC keeps the name a stock install gives it (enp0s*,
    # predictable naming), not eth0. Only the user-network NIC, by the MAC qemu gives the first
    # NIC without one (USER_NIC_MAC): a VM with a second NIC (a cluster network between VMs,
    # tests/vm/cluster.py) configures that one itself.
    _write(root / "etc/systemd/network/20-wired.network",
           f"[Match]\nName=en*\nMACAddress={USER_NIC_MAC}\n\n[Network]\nAddress=10.0.2.15/24\n"
           "Gateway=10.0.2.2\nDNS=10.0.2.3\n")
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    _write(resolv, "nameserver 10.0.2.3\n")
    # The root is mounted rw from the kernel command line: no fstab entry, so no wait for
    # dev-vda.device and no fsck (the overlay dies with the run anyway).
    _write(root / "etc/fstab", "# root: root=/dev/vda rw on the kernel command line\n")
    _write(root / "etc/apt/sources.list", f"deb {MIRROR} {suite} main\n")
    _write(root / f"etc/sudoers.d/{RUNNER_USER}", f"{RUNNER_USER} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    _write(root / "etc/ssh/sshd_config.d/simcluster-vm.conf",
           "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n")
    for home in (root / "root", root / "home" / RUNNER_USER):
        _write(home / ".ssh/authorized_keys", pubkey, 0o600)
        (home / ".ssh").chmod(0o700)


def _enable_and_mask(root: Path, log) -> None:
    _chroot(root, f"""
        id {RUNNER_USER} >/dev/null 2>&1 || useradd -m -u 1001 -s /bin/bash {RUNNER_USER}
        chown -R {RUNNER_USER}:{RUNNER_USER} /home/{RUNNER_USER}
        systemctl enable systemd-networkd ssh
        # an engine that is installed (docker.io) starts only where a test starts it
        for u in docker.service docker.socket containerd.service; do
            [ ! -e /lib/systemd/system/$u ] || systemctl disable $u; done
        systemctl set-default multi-user.target
        # timers that would wake apt or fsck jobs in the middle of a test, and boot steps a
        # VM without disks to wait for, device mapper or EFI does not need (seconds each in TCG)
        for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \\
                 fstrim.timer man-db.timer dpkg-db-backup.timer systemd-networkd-wait-online.service \\
                 modprobe@dm_mod.service modprobe@efi_pstore.service modprobe@drm.service \\
                 systemd-pstore.service; do systemctl mask $u; done
        systemd-machine-id-setup
        passwd -l root
    """, log)


def _build_into(workdir: Path, suite: str, rec: Dict, log) -> Dict[str, float]:
    """Build the image's files into ``workdir``; returns the seconds of each step."""
    root = workdir / "root"
    mirror = rec["mirror"]
    steps: Dict[str, float] = {}
    mark = time.monotonic()

    def done(step: str) -> None:
        nonlocal mark
        now = time.monotonic()
        steps[step] = round(now - mark, 1)
        log.write(f"# step {step}: {steps[step]}s\n")
        log.flush()
        mark = now
    _run(["debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus",
          suite, str(root), mirror], log)
    done("debootstrap")
    # Nothing installed in the chroot may start on the building machine.
    _write(root / "usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", 0o755)
    # No fsync per unpacked file while building (the image is written whole at the end, by
    # mkfs.ext4): the package installs below take a fraction of the time. Removed again.
    _write(root / "etc/dpkg/dpkg.cfg.d/simcluster-vm-build", "force-unsafe-io\n")
    # The initramfs is configured before the kernel is installed: its one generation, by the
    # kernel's own install, is already the small one (only the listed modules, quicker to
    # make and to boot under TCG); no second update-initramfs.
    _write(root / "etc/initramfs-tools/conf.d/simcluster-vm", "MODULES=list\n")
    _write(root / "usr/share/initramfs-tools/modules.d/simcluster-vm",
           "".join(m + "\n" for m in INITRAMFS_MODULES))
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"simcluster-vm-{suite}",
                    "-f", str(workdir / "id_ed25519")], check=True)
    _configure(root, suite, (workdir / "id_ed25519.pub").read_text())
    mounts = []
    try:
        for fs, target, opts in (("proc", "proc", []), ("sysfs", "sys", []),
                                 ("devpts", "dev/pts", ["-o", "gid=5,mode=620"])):
            _run(["mount", "-t", fs, *opts, fs, str(root / target)], log)
            mounts.append(root / target)
        packages = " ".join(rec["guest_packages"] + rec["project_packages"])
        _chroot(root, f"""
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends \\
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold {packages}
            apt-get clean
        """, log)
        done("packages")
    finally:
        for target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], stdout=log, stderr=subprocess.STDOUT)
    _enable_and_mask(root, log)
    (root / "usr/sbin/policy-rc.d").unlink()
    (root / "etc/dpkg/dpkg.cfg.d/simcluster-vm-build").unlink()
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    initrds = sorted((root / "boot").glob("initrd.img-*"))
    if not kernels or not initrds:
        raise RuntimeError(f"no kernel or initrd in {root}/boot after installing {KERNEL_PACKAGE}")
    shutil.copy2(kernels[-1], workdir / "vmlinuz")
    shutil.copy2(initrds[-1], workdir / "initrd.img")
    done("configure")
    used = int(subprocess.run(["du", "-sb", str(root)], stdout=subprocess.PIPE, text=True,
                              check=True).stdout.split()[0])
    size_mb = (used + IMAGE_FREE_BYTES) // (1024 ** 2)
    _run(["mkfs.ext4", "-q", "-L", "simvm-root", "-d", str(root), str(workdir / "base.raw"),
          f"{size_mb}M"], log)
    shutil.rmtree(root)
    done("mkfs")
    return steps


def build(suite: str, root: Optional[Path] = None, log_to=None) -> Image:
    """The image of ``suite`` for the current recipe: from the cache, else built now (minutes)."""
    if os.geteuid() != 0:
        # debootstrap, chroot and mkfs.ext4 -d (owners kept) need root: build through sudo.
        cmd = ["sudo", "-n", "--preserve-env=SIMCLUSTER_VM_CACHE", sys.executable, "-m",
               "tests.vm.image", suite]
        if root is not None:
            cmd = ["sudo", "-n", "env", f"SIMCLUSTER_VM_CACHE={root}", sys.executable, "-m",
                   "tests.vm.image", suite]
        subprocess.run(cmd, cwd=REPO, check=True)
        image = cached_image(suite, root)
        if image is None:
            raise RuntimeError(f"the {suite} image build through sudo left no image")
        return image
    root = root or cache_root()
    rec = recipe(suite)
    name = f"{suite}-{recipe_hash(rec)}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits, then finds the image
        final = root / name
        if (final / "recipe.json").is_file():
            return Image(suite, final)
        for stale in root.glob(f".build-{suite}-*"):  # an interrupted build (we hold the lock)
            _remove_build(stale)
        started = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=root))
        log_path = root / f"{name}.build.log"
        try:
            with open(log_path, "w") as log:
                steps = _build_into(workdir, suite, rec, log)
            rec = dict(rec, build_seconds=round(time.monotonic() - started, 1), build_steps=steps,
                       built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            (workdir / "recipe.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
            os.chmod(workdir, 0o755)
            workdir.rename(final)
        except BaseException as exc:
            _remove_build(workdir)
            tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
            if isinstance(exc, RuntimeError):
                raise RuntimeError(f"{exc}\nbuild log {log_path}, its end:\n{tail}") from None
            raise
        _mark_used(final)
        for old in root.glob(f"{suite}-*"):  # images of other recipes, long unused
            stamp = old / "last-used"
            if old.is_dir() and old != final and stamp.exists() and \
                    time.time() - stamp.stat().st_mtime > UNUSED_DAYS * 86400:
                shutil.rmtree(old, ignore_errors=True)
                Path(f"{old}.build.log").unlink(missing_ok=True)
        return Image(suite, final)


def _remove_build(workdir: Path) -> None:
    """Remove a failed build; first undo any mount left inside its chroot."""
    for target in ("dev/pts", "sys", "proc"):
        path = workdir / "root" / target
        if os.path.ismount(path):
            subprocess.run(["umount", "-l", str(path)], stderr=subprocess.DEVNULL)
    shutil.rmtree(workdir, ignore_errors=True)


# What the recipe hash covers of this file: the steps that make an image.
RECIPE_STEPS = (_configure, _enable_and_mask, _build_into)


def main(argv: List[str]) -> int:
    suites = argv or list(SUITES)
    for suite in suites:
        if suite not in SUITES:
            print(f"error: unknown suite {suite!r}; the rig builds: {' '.join(SUITES)}", file=sys.stderr)
            return 2
    for suite in suites:
        started = time.monotonic()
        cached = cached_image(suite)
        image = cached or build(suite)
        how = "cached" if cached else f"built in {time.monotonic() - started:.0f}s"
        print(f"{suite}: {image.path} ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
