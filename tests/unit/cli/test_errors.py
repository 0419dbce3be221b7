"""Bad input at the real command line: one clear line, the right exit code, nothing left.

Every case runs ``python -m provisioner ...`` as a subprocess with SIMCLUSTER_HOME set to
a fresh directory. Exit 2 is bad input, exit 1 an error that is not (no such cluster).
stderr is one ``error: ...`` line; an invalid spec with several problems adds only
``  - <problem>`` lines. Never a traceback (unless -v), never a cluster directory or a
process left behind (the ``cli_home`` fixture checks both). All cases fail before any
daemon starts; the ones that reach the pre-flight checks need Slurm and munge installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Union

import pytest

from provisioner.providers.local import preflight
from provisioner.errors import SimclusterError
from tests.conftest import run_cli
from tests.unit.conftest import cluster_dirs


def _have_slurm() -> bool:
    try:
        preflight.require_binaries()
        preflight.find_nss_wrapper()
    except SimclusterError:
        return False
    return True


needs_slurm = pytest.mark.skipif(not _have_slurm(), reason="Slurm, munge or libnss-wrapper not installed")
no_gpu_6_7 = pytest.mark.skipif(any(os.path.exists(f"/dev/nvidia{i}") for i in (6, 7)),
                                reason="this host has GPU 6 or 7")


@dataclass
class Case:
    """One bad input. ``{tmp}`` in args is a scratch directory holding ``files``."""

    args: List[str]
    says: str  # text the error must contain
    code: int = 2
    files: Dict[str, Union[str, bytes]] = field(default_factory=dict)
    problems: int = 0  # '  - ' detail lines of a multi-problem spec error


def yaml_case(text: Union[str, bytes], says: str, problems: int = 0) -> Case:
    return Case(["up", "--config", "{tmp}/c.yaml"], says, files={"c.yaml": text}, problems=problems)


ABSENT = "absent-cluster-7f3a"  # no cluster of this name exists, local or docker

CASES = {
    # flags click parses
    "unknown-flag": Case(["up", "--bogus"], "No such option '--bogus'"),
    "unknown-command": Case(["nosuchcmd"], "No such command 'nosuchcmd'"),
    "nodes-not-a-number": Case(["up", "--nodes", "abc"], "'abc' is not a valid integer"),
    "wait-not-a-number": Case(["up", "--wait", "abc"], "'abc' is not a valid float"),
    "exec-without-command": Case(["exec", "--name", ABSENT], "Missing argument"),
    # flags the spec validates
    "nodes-zero": Case(["up", "--nodes", "0"], "nodes: 0 is out of range 1-1024"),
    "slurm-unknown-release": Case(["up", "--slurm", "23.02"], "slurm: '23.02' is not a Slurm release"),
    "image-build-unknown-release": Case(["image", "build", "--slurm", "25.05"], "--slurm: '25.05' is not a Slurm"),
    "nodes-negative": Case(["up", "--nodes", "-1"], "nodes: -1 is out of range 1-1024"),
    "nodes-too-many": Case(["up", "--nodes", "2000"], "nodes: 2000 is out of range 1-1024"),
    "name-uppercase": Case(["up", "--name", "Upper"], "name: 'Upper' is not a valid cluster name"),
    "name-path": Case(["up", "--name", "../x"], "name: '../x' is not a valid cluster name"),
    "name-too-long": Case(["up", "--name", "a" * 40], "is not a valid cluster name"),
    "name-empty": Case(["up", "--name", ""], "name: '' is not a valid cluster name"),
    "gpus-not-numbers": Case(["up", "--gpus", "a,b"], "gpus: bad GPU id 'a'"),
    "gpus-range-backwards": Case(["up", "--gpus", "3-1"], "bad GPU range '3-1': start is after end"),
    "gpus-twice": Case(["up", "--gpus", "1,1"], "GPU id 1 listed twice"),
    "gpus-huge-range": Case(["up", "--gpus", "0-99999999999", "--fake-gpus"], "out of range 0-255"),
    "gpus-uneven": Case(["up", "--nodes", "2", "--gpus", "0,1,2"], "3 GPUs cannot be split evenly over 2 nodes"),
    "fake-gpus-zero": Case(["up", "--fake-gpus", "0"], "--fake-gpus expects a positive GPU count"),
    "fake-gpus-word": Case(["up", "--fake-gpus", "x"], "--fake-gpus expects a positive GPU count"),
    "fake-gpus-superscript": Case(["up", "--fake-gpus", "²"], "--fake-gpus expects a positive GPU count"),
    "fake-gpus-and-list": Case(["up", "--gpus", "0,1", "--fake-gpus", "2"], "not both"),
    "memory-unit": Case(["up", "--memory", "12X"], "memory: bad memory size '12X'"),
    "memory-zero": Case(["up", "--memory", "0"], "memory must be at least 1 MB"),
    "cpus-zero": Case(["up", "--cpus", "0"], "cpus: 0 is out of range"),
    "backend-unknown": Case(["up", "--backend", "nosuch"], "unknown backend 'nosuch' (available: local, docker)"),
    "image-on-local": Case(["up", "--image", "foo"], "only applies to the docker backend"),
    "wait-zero": Case(["up", "--wait", "0"], "wait: expected seconds"),
    "render-nodes-zero": Case(["render", "--out", "{tmp}/out", "--nodes", "0"], "nodes: 0 is out of range"),
    "render-out-not-a-dir": Case(["render", "--out", "{tmp}/afile/out"], "cannot write configs to",
                                 files={"afile": "x"}),
    # spec files
    "config-missing": Case(["up", "--config", "{tmp}/missing.yaml"], "does not exist"),
    "config-directory": Case(["up", "--config", "{tmp}"], "does not exist"),
    "yaml-syntax": yaml_case("apiVersion: simcluster/v1\nnodes: [\n", "is not valid YAML at line 3"),
    "yaml-python-tag": yaml_case("name: !!python/object/apply:os.system ['true']\n", "is not valid YAML"),
    "yaml-binary": yaml_case(b"\xff\xfe\x00\x01name: x\n", "not UTF-8"),
    "yaml-unknown-key": yaml_case("apiVersion: simcluster/v1\nkind: Cluster\nnodez: 2\n",
                                  "unknown key 'nodez' (allowed: "),
    "yaml-snake-case-key": yaml_case("fake_gpus: 2\n", "unknown key 'fake_gpus' (did you mean 'fakeGpus'?)"),
    "yaml-non-string-keys": yaml_case("1: a\nfoo: b\n", "unknown key '1'", problems=2),
    "yaml-api-version": yaml_case("apiVersion: simcluster/v2\n", "apiVersion: must be 'simcluster/v1'"),
    "yaml-kind": yaml_case("apiVersion: simcluster/v1\nkind: Pod\n", "kind: must be 'Cluster', got 'Pod'"),
    "yaml-list": yaml_case("- name: a\n- name: b\n", "expected a mapping at the top level, got list"),
    "yaml-empty": yaml_case("", "the file is empty"),
    "yaml-nodes-float": yaml_case("nodes: 2.5\n", "expected a node count or a list of nodes"),
    "yaml-partition-unknown-node": yaml_case(
        "nodes: 2\npartitions:\n  - name: p\n    nodes: [node1, node9]\n", "unknown node 'node9'"),
    "yaml-two-default-partitions": yaml_case(
        "partitions:\n  - name: a\n    default: true\n  - name: b\n    default: true\n",
        "more than one partition has default: true"),
    "yaml-duplicate-node": yaml_case("nodes:\n  - name: a\n  - name: a\n", "node 'a' is listed twice"),
    "yaml-duplicate-port": yaml_case("nodes:\n  - name: a\n    port: 20001\n  - name: b\n    port: 20001\n",
                                     "port 20001 is used twice"),
    "yaml-gpu-on-two-nodes": yaml_case("nodes:\n  - name: a\n    gpus: [0]\n  - name: b\n    gpus: 0-1\n",
                                       "GPU 0 is given to more than one node"),
    "yaml-node-unknown-key": yaml_case("nodes:\n  - name: a\n    gpu: [0]\n", "nodes[0]: unknown key 'gpu'"),
    "yaml-slurmconf-multiline": yaml_case('slurmConf:\n  - "A=1\\nB=2"\n', "is not a single 'Key=Value' line"),
    "yaml-many-problems": yaml_case("name: Bad\nnodes: 0\ncpus: 0\nmemory: 12X\n", "4 problems", problems=4),
    # (the pre-flight checks of `up` -- GPUs, ports, path length -- have their own tests below)
    # not bad input: the cluster does not exist (exit 1)
    "status-absent": Case(["status", "--name", ABSENT], f"no cluster named '{ABSENT}'", code=1),
    "status-json-absent": Case(["status", "--name", ABSENT, "--json"], f"no cluster named '{ABSENT}'", code=1),
    "down-absent": Case(["down", "--name", ABSENT], f"no cluster named '{ABSENT}'", code=1),
    "env-absent": Case(["env", "--name", ABSENT], f"no cluster named '{ABSENT}'", code=1),
    "exec-absent": Case(["exec", "--name", ABSENT, "--", "true"], f"no cluster named '{ABSENT}'", code=1),
    "export-logs-absent": Case(["export-logs", "{tmp}/bundle", "--name", ABSENT],
                               f"no cluster named '{ABSENT}'", code=1),
    # bad names for existing-cluster commands: never a path outside SIMCLUSTER_HOME
    "down-all-and-name": Case(["down", "--all", "--name", "x"], "give either --name or --all, not both"),
    "status-name-path": Case(["status", "--name", "../x"], "'../x' is not a valid cluster name"),
    "down-name-path": Case(["down", "--name", "../x"], "'../x' is not a valid cluster name"),
    "env-name-absolute": Case(["env", "--name", "/tmp"], "'/tmp' is not a valid cluster name"),
    "export-logs-name-path": Case(["export-logs", "{tmp}/bundle", "--name", ".."], "'..' is not a valid cluster name"),
}


def check_error(proc: subprocess.CompletedProcess, code: int, says: str, problems: int = 0) -> None:
    """Exit ``code``; stderr is one 'error:' line (+ ``problems`` '  - ' lines); no traceback."""
    context = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr, context
    assert proc.returncode == code, context
    assert proc.stdout == "", context
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), context
    assert len(lines) == 1 + problems, context
    assert all(line.startswith("  - ") and len(line) > 4 for line in lines[1:]), context
    assert says in proc.stderr, context


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input(case: Case, cli_home: Path, tmp_path: Path):
    for name, content in case.files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.args]
    proc = run_cli(args, cli_home, timeout=60)
    check_error(proc, case.code, case.says, case.problems)
    assert not (tmp_path / "bundle").exists()
    assert not (tmp_path / "out").exists()


@needs_slurm
def test_local_backend_refuses_another_slurm_release(cli_home):
    """The local backend runs the host's Slurm: another release is one line pointing at docker."""
    from provisioner.config.versions import SLURM_SUITES, host_slurm_version, release_of
    other = next(r for r in SLURM_SUITES if r != release_of(host_slurm_version() or ""))
    proc = run_cli(["up", "--name", "ver-refused", "--slurm", other], cli_home, timeout=60)
    check_error(proc, 2, f"--backend docker --slurm {other}")
    assert not cluster_dirs(cli_home)


def test_there_are_at_least_20_distinct_bad_inputs():
    inputs = {(tuple(c.args), tuple(sorted(c.files.items()))) for c in CASES.values()}
    assert len(inputs) == len(CASES) >= 20
    assert sum(c.code == 2 for c in CASES.values()) >= 20


@no_gpu_6_7
@needs_slurm
def test_missing_gpus_hint_at_fake_gpus(cli_home):
    proc = run_cli(["up", "--nodes", "2", "--gpus", "6,7"], cli_home, timeout=60)
    check_error(proc, 2, "GPU 6 not found")
    assert "--fake-gpus" in proc.stderr


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


@needs_slurm
@pytest.mark.parametrize("where", ["node", "controller"])
def test_explicit_port_already_in_use(cli_home, tmp_path, where):
    with _listening_socket() as sock:
        port = sock.getsockname()[1]
        spec = tmp_path / "ports.yaml"
        if where == "node":
            spec.write_text(f"name: busy\nnodes:\n  - name: a\n    port: {port}\n  - name: b\n")
        else:
            spec.write_text(f"name: busy\nnodes: 2\ncontrollerPort: {port}\n")
        proc = run_cli(["up", "--config", str(spec)], cli_home, timeout=60)
    check_error(proc, 2, f"port {port} is already in use")
    assert not (cli_home / "busy").exists()


@needs_slurm
def test_state_directory_too_long_for_a_socket(cli_home):
    home = cli_home / ("h" * 90)
    proc = run_cli(["up", "--name", "long", "--nodes", "1"], home, timeout=60)
    check_error(proc, 2, "too long for a unix socket")
    assert "SIMCLUSTER_HOME" in proc.stderr
    assert cluster_dirs(home) == []
    shutil.rmtree(home)  # the home itself was made (for its lock file); it holds no cluster


def test_verbose_shows_the_traceback(cli_home):
    proc = run_cli(["-v", "up", "--nodes", "0"], cli_home, timeout=60)
    assert proc.returncode == 2
    assert "Traceback (most recent call last)" in proc.stderr
    assert "ConfigError" in proc.stderr
    assert proc.stderr.splitlines()[-1] == "error: invalid cluster spec: nodes: 0 is out of range 1-1024"


def test_without_verbose_the_same_error_has_no_traceback(cli_home):
    proc = run_cli(["up", "--nodes", "0"], cli_home, timeout=60)
    check_error(proc, 2, "nodes: 0 is out of range 1-1024")


def test_unusable_simcluster_home(tmp_path):
    (tmp_path / "afile").write_text("x")
    home = tmp_path / "afile" / "home"  # a path below a regular file cannot be created
    proc = run_cli(["up", "--nodes", "1", "--fake-gpus", "1"], home, timeout=60)
    check_error(proc, 1, f"Not a directory: {tmp_path / 'afile'}")


def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path):
    """`simcluster list | true`: the pipe's reader is gone before simcluster writes. The
    command ends as a Unix tool killed by SIGPIPE would (141), with no `error:` line."""
    env = dict(os.environ, SIMCLUSTER_HOME=str(tmp_path))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before anything was written
    try:
        proc = subprocess.run([sys.executable, "-m", "provisioner", "list"], env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == "", proc.stderr
