"""DockerExecRunner against a bare node container (no cluster): which pids count as our daemons."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from provisioner.providers.docker import image
from provisioner.providers.docker.exec_runner import DockerExecRunner, boot_id

pytestmark = pytest.mark.integration

MARKER = "SIMCLUSTER_TEST_MARK=1"


@pytest.fixture(scope="module")
def container():
    tag = image.default_image(image.DEFAULT_SLURM)
    if image.image_labels(tag) is None:
        pytest.skip(f"image {tag} not built (simcluster image build)")
    name = f"simcluster-test-runner-{uuid.uuid4().hex[:6]}"
    subprocess.run(["docker", "run", "-d", "--init", "--name", name, tag], check=True, stdout=subprocess.DEVNULL)
    yield name
    subprocess.run(["docker", "rm", "-f", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_pids_alive_tells_our_daemons_from_other_processes(container):
    runner = DockerExecRunner(container)
    ours = runner.start_daemon(["sleep", "60"], "/tmp/ours.log", {"SIMCLUSTER_TEST_MARK": "1"})
    other = runner.start_daemon(["sleep", "60"], "/tmp/other.log", {"SOMETHING_ELSE": "1"})
    # A process whose environment reads empty is what a daemon looks like while it is inside
    # execve (start_daemon forks, then execs setsid, then the daemon): it must not count as
    # dead (the guard of `up` then reported a live slurmctld as "exited during startup").
    empty = runner.start_daemon(["env", "-i", "sleep", "60"], "/tmp/empty.log", {"SIMCLUSTER_TEST_MARK": "1"})
    gone = runner.start_daemon(["true"], "/tmp/gone.log", {"SIMCLUSTER_TEST_MARK": "1"})
    runner.run(["sleep", "0.3"])  # `true` has exited, `env -i` has exec'd sleep
    assert runner.pids_alive([ours, other, empty, gone, 99999], MARKER) == {
        ours: True, other: False, empty: True, gone: False, 99999: False}
    assert runner.pids_alive([ours, other], None) == {ours: True, other: True}
    # ... but only a daemon started by this process: a recorded pid that, after a container
    # restart, numbers another process whose environment reads empty is not ours.
    stranger = int(runner.run(["sh", "-c", "env -i sleep 60 >/dev/null 2>&1 & echo $!"]).stdout)
    runner.run(["sleep", "0.3"])
    assert runner.pids_alive([stranger], None) == {stranger: True}
    assert runner.pids_alive([stranger], MARKER) == {stranger: False}
    runner.kill([ours, other, empty, stranger])
    assert runner.pids_alive([ours], MARKER) == {ours: False}


def test_pids_alive_of_a_container_that_is_gone_is_all_dead():
    runner = DockerExecRunner(f"simcluster-test-absent-{uuid.uuid4().hex[:6]}")
    assert runner.pids_alive([1, 7], MARKER) == {1: False, 7: False}


def test_exists_sees_the_container_as_its_commands_do(container):
    runner = DockerExecRunner(container)
    runner.run(["sh", "-c", "mkdir -p /run/t && : > /run/t/file && mknod /dev/t-null c 1 3"])
    # The engine finds the first (no exec); /dev is the runtime's own tmpfs, which the
    # engine does not see: `test -e` in the container answers there.
    assert runner.exists("/run/t/file") and runner.exists("/dev/t-null") and runner.exists("/proc/self")
    assert not runner.exists("/run/t/absent") and not runner.exists("/dev/t-absent")


def test_pids_alive_of_a_paused_container_is_all_dead_at_once(container):
    runner = DockerExecRunner(container)
    pid = runner.start_daemon(["sleep", "60"], "/tmp/paused.log", {"SIMCLUSTER_TEST_MARK": "1"})
    subprocess.run(["docker", "pause", container], check=True, stdout=subprocess.DEVNULL)
    try:
        # The engine refuses execs in a paused container: no answer is asked again there.
        assert runner.pids_alive([pid], MARKER) == {pid: False}
        assert not runner._running()
    finally:
        subprocess.run(["docker", "unpause", container], check=True, stdout=subprocess.DEVNULL)
    assert runner.pids_alive([pid], MARKER) == {pid: True}


def test_listening_read_from_this_host_agrees_with_the_container_and_follows_a_restart(container):
    runner = DockerExecRunner(container)
    proc, cid = runner.host_proc()
    assert proc and cid.startswith(subprocess.run(["docker", "inspect", "-f", "{{.Id}}", container], check=True,
                                                  capture_output=True, text=True).stdout.strip()[:12])
    # A port only the container listens on (its own network namespace, not this host's).
    pid = runner.start_daemon(["python3", "-c", "import socket,time; s=socket.socket(); "
                               "s.bind(('0.0.0.0', 47123)); s.listen(); time.sleep(60)"], "/tmp/listen.log")
    runner.run(["sh", "-c", "for i in $(seq 50); do grep -q ':B833 ' /proc/net/tcp && exit 0; sleep 0.1; done"])
    assert runner.listening(47123) and not runner.listening(47124)
    assert runner._read_on_host(["net/tcp"]) is not None  # answered from this host, no exec
    runner.kill([pid])
    # After a restart the container's first process is another: the old path is not used.
    subprocess.run(["docker", "restart", "-t", "0", container], check=True, stdout=subprocess.DEVNULL)
    assert not runner.listening(47123)
    assert runner.host_proc()[0] not in ("", proc)


@pytest.mark.parametrize("from_host", [True, False], ids=["read-from-host", "one-exec"])
def test_start_daemon_adopts_what_the_boot_started_and_starts_the_rest(container, from_host):
    """A container that boots (docs/docker.md): the daemon its boot recorded is adopted, not
    started twice; one it did not record, or that died since, is started."""
    argv, log, env = ["sleep", "63"], "/tmp/booted.log", {"SIMCLUSTER_TEST_MARK": "1"}
    plain = DockerExecRunner(container)
    # What the boot script does: start the daemon, record its pid under boot_id ("done" is
    # there already: this container's entrypoint found no boot script).
    pid = plain.start_daemon(argv, log, env)
    plain.run(["sleep", "0.3"])
    plain.run(["sh", "-c", f"echo {pid} > /run/simcluster-boot/{boot_id(argv, log, env)}.pid"])
    runner = DockerExecRunner(container, boots=True)
    if not from_host:  # as with a remote or rootless engine
        runner.host_proc = lambda: ("", "")
    assert runner.start_daemon(argv, log, env) == pid
    other = runner.start_daemon(["sleep", "64"], log, env)
    assert other != pid and runner.pids_alive([pid, other], MARKER) == {pid: True, other: True}
    ps = runner.run(["ps", "-eo", "args"]).stdout.splitlines()
    assert ps.count("sleep 63") == 1, ps
    runner.kill([pid, other])
    time.sleep(0.3)
    again = runner.start_daemon(argv, log, env)  # the recorded one died: started anew
    assert again != pid and runner.pids_alive([again], MARKER) == {again: True}
    runner.kill([again])
