"""Several VMs on one private network: the "real hosts" of the systemd deploy case.

    from tests.vm.cluster import VMCluster

    with VMCluster(build("bookworm"), workdir, ["node1", "node2"]) as rig:   # boots them all
        rig.hosts["node1"].port, rig.hosts["node1"].addr        # ssh port on 127.0.0.1, cluster address
        rig.inventory(path, controller="node1", compute=["node1", "node2"], cluster="vmdt")
        rig.vm("node2").run("systemctl is-active slurmd")          # as root, through runner's sudo
    # every qemu stopped, also when a boot or a test failed

What each guest is (tests/vm/machine.py's Machine, plus):
- **A second NIC on a network only these VMs share**: qemu's socket netdev on a multicast
  group of the loopback interface (``mcast=239.x.y.z:PORT,localaddr=127.0.0.1``, a group and
  port drawn per rig, so two rigs never hear each other). Nothing outside this machine
  reaches it; the guests address each other on 10.77.0.0/24 (NODE_NET), node i at .(10+i),
  configured by a systemd-networkd file matching the NIC's MAC (it stays across reboots).
  The first NIC stays qemu's user network: ssh from this machine through a forwarded port on
  127.0.0.1, and NAT to Debian's archive for apt.
- **A host's name** (hostnamectl) and every node's name in /etc/hosts: what DNS gives a
  real cluster.
- **No root login**: root's authorized key is removed and sshd says ``PermitRootLogin no``;
  everything is done as ``runner`` (passwordless sudo, the image's key), and this class's
  ``run(..., user="root")`` goes through ``sudo -n`` (so Machine's helpers, log collection
  included, keep working).
- **Reboots stay in qemu** (no ``-no-reboot``): ``reboot()`` restarts the guest in the same
  qemu process and waits for ssh again; the overlay (the VM's disk) is kept.
"""

from __future__ import annotations

import random
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from tests.vm.image import RUNNER_USER, Image
from tests.vm.machine import Machine

NODE_NET = "10.77.0"  # /24: node i of a rig is NODE_NET.(10 + i)


def node_mac(index: int) -> str:
    return f"52:54:00:77:00:{10 + index:02x}"


class ClusterMachine(Machine):
    """A Machine with a second NIC on the rig's multicast network, reached only as runner."""

    def __init__(self, image: Image, workdir: Union[str, Path], *, hostname: str, index: int,
                 mcast: str, **kwargs) -> None:
        super().__init__(image, workdir, **kwargs)
        self.hostname = hostname
        self.index = index
        self.mcast = mcast
        self.addr = f"{NODE_NET}.{10 + index}"
        self.mac = node_mac(index)

    def _qemu_command(self) -> List[str]:
        cmd = [a for a in super()._qemu_command() if a != "-no-reboot"]
        cmd[cmd.index("-name") + 1] = f"simcluster-vm-{self.image.suite}-{self.hostname}"
        return cmd + ["-netdev", f"socket,id=cluster,mcast={self.mcast},localaddr=127.0.0.1",
                      "-device", f"virtio-net-pci,netdev=cluster,mac={self.mac}"]

    def _ssh(self, argv: Sequence[str], *, user: str = "root", **kwargs):
        # Root cannot log in: root's commands run as runner through sudo.
        if user == "root":
            return super()._ssh(["sudo", "-n", *argv], user=RUNNER_USER, **kwargs)
        return super()._ssh(argv, user=user, **kwargs)

    def host_key_line(self) -> str:
        """A known_hosts line for this guest's ed25519 host key at its forwarded port."""
        key = self.run("cat /etc/ssh/ssh_host_ed25519_key.pub", check=True).stdout.split()
        return f"[127.0.0.1]:{self.port} {key[0]} {key[1]}"

    def reboot(self, timeout: float = 300.0) -> float:
        """`systemctl reboot` in the guest; wait until ssh answers again. Returns the seconds."""
        boot_id = self.run("cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip()
        started = time.monotonic()
        self.run("systemctl reboot", timeout=30)
        self._close_masters()
        deadline = started + timeout
        while time.monotonic() < deadline:
            res = self._ssh(["cat", "/proc/sys/kernel/random/boot_id"], timeout=30, connect_timeout=5,
                            master=False)
            if res.returncode == 0 and res.stdout.strip() and res.stdout.strip() != boot_id:
                return round(time.monotonic() - started, 1)
            time.sleep(3)
        raise AssertionError(f"{self.hostname} did not come back from a reboot within {timeout:.0f}s; "
                             f"serial log tail:\n{self.serial_tail()}")

    def _close_masters(self) -> None:
        for ctl in self.workdir.glob("ssh-*.ctl"):
            subprocess.run(["ssh", "-o", f"ControlPath={ctl}", "-O", "exit", "vm"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)


@dataclass
class Host:
    name: str
    port: int
    addr: str


class VMCluster:
    """Boot VMs named ``names`` from ``image`` on one private network; stop() stops them all."""

    def __init__(self, image: Image, workdir: Union[str, Path], names: Sequence[str], *,
                 memory_mb: Optional[Dict[str, int]] = None, cpus: int = 2) -> None:
        self.image = image
        self.workdir = Path(workdir)
        self.names = list(names)
        rnd = random.SystemRandom()
        # A group and port of this rig's own (administratively scoped 239/8, on loopback only).
        self.mcast = f"239.{rnd.randint(1, 254)}.{rnd.randint(1, 254)}.{rnd.randint(1, 254)}:" \
                     f"{rnd.randint(20000, 60000)}"
        self.machines: Dict[str, ClusterMachine] = {}
        self.memory_mb = memory_mb or {}
        self.cpus = cpus
        self.boot_seconds: Dict[str, float] = {}

    def __enter__(self) -> "VMCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def vm(self, name: str) -> ClusterMachine:
        return self.machines[name]

    @property
    def hosts(self) -> Dict[str, Host]:
        return {n: Host(n, m.port, m.addr) for n, m in self.machines.items()}

    @property
    def key(self) -> Path:
        return self.image.key

    def start(self) -> "VMCluster":
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Registered before they boot, so stop() finds each one whatever fails.
        for i, name in enumerate(self.names, start=1):
            self.machines[name] = ClusterMachine(
                self.image, self.workdir / name, hostname=name, index=i, mcast=self.mcast,
                memory_mb=self.memory_mb.get(name, 1536), cpus=self.cpus)
        try:
            # Every qemu first, then wait for each: the boots overlap.
            for machine in self.machines.values():
                machine.launch()
            for machine in self.machines.values():
                machine.wait_ready()
                self.boot_seconds[machine.hostname] = machine.boot_seconds
            for machine in self.machines.values():
                self._configure(machine)
            for machine in self.machines.values():
                self._wait_for_peers(machine)
        except BaseException:
            self.stop()
            raise
        return self

    def _configure(self, vm: ClusterMachine) -> None:
        hosts = "".join(f"{m.addr} {m.hostname}\n" for m in self.machines.values())
        network = (f"[Match]\nMACAddress={vm.mac}\n\n[Network]\nAddress={vm.addr}/24\n"
                   "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
        # The address now (ip) and at every boot (networkd's file, read at boot: reloading
        # networkd here would reconfigure the user-network NIC too, under the ssh connection).
        # network-online.target waits for it at boot (the image masks networkd's wait-online
        # for its own quick boots): Debian's slurmd.service starts after that target, and a
        # slurmd started before its NodeAddr exists exits at once (seen on a rebooted node1).
        vm.run(f"""set -e
            hostnamectl set-hostname {vm.hostname}
            printf '127.0.0.1 localhost\\n::1 localhost ip6-localhost\\n%s' {shlex.quote(hosts)} > /etc/hosts
            printf '%s' {shlex.quote(network)} > /etc/systemd/network/10-cluster.network
            dev=$(ip -br link | awk '$3 == "{vm.mac}" {{print $1}}')
            ip addr add {vm.addr}/24 dev "$dev"
            ip link set dev "$dev" up
            systemctl unmask systemd-networkd-wait-online.service
            systemctl enable systemd-networkd-wait-online.service
            rm -f /root/.ssh/authorized_keys
            echo 'PermitRootLogin no' > /etc/ssh/sshd_config.d/00-no-root-login.conf
            systemctl reload ssh
            """, check=True, timeout=120)

    def _wait_for_peers(self, vm: ClusterMachine) -> None:
        """The cluster network works once the other guests answer ``vm`` on it (ping, 2 s each)."""
        deadline = time.monotonic() + 90
        others = [m.addr for m in self.machines.values() if m is not vm]
        while True:
            res = vm.run(" && ".join(f"ping -c1 -W2 {a} >/dev/null" for a in others) or "true", timeout=60)
            if res.returncode == 0:
                return
            if time.monotonic() > deadline:
                addrs = vm.run("ip -br addr", timeout=30).stdout
                raise AssertionError(f"{vm.hostname} cannot reach {', '.join(others)} on the rig's "
                                     f"network ({self.mcast}):\n{addrs}")
            time.sleep(2)

    def known_hosts(self, path: Path) -> Path:
        """Each guest's host key at its forwarded port, and at its cluster address (port 22):
        how `fault --ssh` reaches a compute host, jumped through the controller."""
        lines = []
        for m in self.machines.values():
            line = m.host_key_line()
            lines += [line, f"{m.addr} {line.split(None, 1)[1]}"]
        path.write_text("".join(f"{line}\n" for line in lines))
        return path

    def inventory(self, path: Path, *, controller: str, compute: Sequence[str], cluster: str,
                  known_hosts: Path, group_vars: Sequence[str] = (),
                  host_vars: Optional[Dict[str, str]] = None) -> Path:
        """An INI inventory: each VM by its forwarded port, as runner with become, its cluster
        address as slurm_node_addr (the default IPv4 of every guest is the same user-network one)."""
        extra = host_vars or {}

        def line(h: str) -> str:
            m = self.machines[h]
            return (f"{h} ansible_host=127.0.0.1 ansible_port={m.port} slurm_node_addr={m.addr} "
                    f"{extra.get(h, '')}").rstrip()

        path.write_text("\n".join([
            "[controller]", line(controller), "",
            "[compute]", *[line(h) for h in compute], "",
            "[all:vars]", f"ansible_user={RUNNER_USER}", "ansible_become=true",
            f"ansible_ssh_private_key_file={self.key}",
            f"ansible_ssh_common_args='-o UserKnownHostsFile={known_hosts} -o IdentitiesOnly=yes'",
            "ansible_python_interpreter=/usr/bin/python3",
            f"slurm_cluster_name={cluster}", *group_vars, ""]))
        return path

    def stop(self) -> None:
        for machine in self.machines.values():
            machine.stop()

    def running(self) -> List[str]:
        """Names of the VMs whose qemu still runs (for the no-leftovers check)."""
        return [n for n, m in self.machines.items() if m.proc is not None and m.proc.poll() is None]
