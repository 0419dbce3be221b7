"""`--sudo` (provisioner.sudo): the command line root runs, and the refusals before it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import sudo
from provisioner.errors import UsageError


def test_root_argv_keeps_the_command_and_the_users_simcluster_settings_only():
    env = {"SIMCLUSTER_HOME": "/srv/sc", "SIMCLUSTER_TEMPLATES": "/t", "PYTHONPATH": "/mine:/other",
           "SLURM_CONF": "/etc/slurm.conf", "HOME": "/home/runner", "LD_PRELOAD": "/evil.so"}
    argv = sudo.root_argv(["-v", "up", "--sudo", "--name", "ci", "--nodes", "2"], env, "/venv/bin/python3",
                          sudo="/usr/bin/sudo", code="/src/simcluster")
    assert argv[:3] == ["/usr/bin/sudo", "-n", "--"]  # -n: never a password prompt
    assert argv[3].endswith("/env")
    # sudo resets the environment: what root must share goes through `env`, nothing else.
    assert argv[4:7] == ["PYTHONPATH=/src/simcluster:/mine:/other", "SIMCLUSTER_HOME=/srv/sc",
                         "SIMCLUSTER_TEMPLATES=/t"]
    assert argv[7] == "/venv/bin/python3"
    assert argv[-6:] == ["-v", "up", "--name", "ci", "--nodes", "2"]  # --sudo itself dropped
    assert not any(a.startswith(("SLURM_CONF=", "HOME=", "LD_PRELOAD=")) for a in argv)


def test_root_argv_without_a_checkout_adds_no_pythonpath():
    argv = sudo.root_argv(["down", "--sudo"], {}, "/venv/bin/python3", code="")
    assert not any(a.startswith("PYTHONPATH=") for a in argv)
    assert argv[-1] == "down" and "--sudo" not in argv


@pytest.mark.parametrize("version", [(3, 9), (3, 11)])
def test_root_python_never_imports_simcluster_from_the_working_directory(tmp_path, version):
    if tuple(sys.version_info[:2]) < version:
        pytest.skip(f"needs Python {version[0]}.{version[1]}")
    # A directory with a `provisioner/` of its own, as a user's checkout of something else:
    # root must run the simcluster the user runs, not that one.
    fake = tmp_path / "provisioner"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('imported from the working directory')\n")
    (fake / "__main__.py").write_text("raise SystemExit('imported from the working directory')\n")
    argv = sudo.python_argv(sys.executable, version) + ["--version"]
    repo = str(Path(sudo.__file__).resolve().parents[1])
    proc = subprocess.run(argv, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=repo), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("simcluster ")


def test_check_sudo_refuses_in_one_line_when_sudo_wants_a_password(tmp_path):
    fake = tmp_path / "sudo"
    fake.write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(UsageError) as err:
        sudo.check_sudo(str(fake))
    line = err.value.one_line()
    assert "cannot run sudo without a password here (sudo -n true: sudo: a password is required)" in line
    assert "sudo -v" in line and "leave out --sudo" in line
    with pytest.raises(UsageError, match="--sudo: no sudo program on this machine"):
        sudo.check_sudo(None)


def test_up_sudo_reads_the_spec_as_the_user_before_anything_runs_as_root(monkeypatch):
    from click.testing import CliRunner

    from provisioner.cli.main import cli
    calls = []
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sudo, "rerun_as_root", lambda what, progress, args=None: calls.append(what) or 0)
    bad = CliRunner().invoke(cli, ["up", "--sudo", "--nodes", "0"])
    assert bad.exit_code == 2 and "nodes: 0 is out of range" in bad.output
    assert calls == []  # bad input: nothing ran as root
    spec = Path(sudo.__file__).resolve().parents[1] / "configs" / "examples" / "node6-node7-one-gpu-each.yaml"
    good = CliRunner().invoke(cli, ["up", "--sudo", "--config", str(spec)])
    assert good.exit_code == 0, good.output
    # The cluster's name comes from the spec file: the user is told how to reach that one.
    assert calls == ["up 'node6-node7'"]
    assert 'eval "$(simcluster env --name node6-node7)"' in good.output
    assert "simcluster down --sudo --name node6-node7" in good.output


def test_down_sudo_refuses_a_cluster_of_the_users_own(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from provisioner.cli.main import cli
    calls = []
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sudo, "rerun_as_root", lambda what, progress, args=None: calls.append(what) or 0)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "state.json").write_text("{}")
    res = CliRunner().invoke(cli, ["down", "--sudo", "--name", "mine"])
    assert calls == [] and res.exit_code == 2, res.output
    assert "cluster 'mine' is yours (rootless" in res.output and "simcluster down --name mine" in res.output
    res = CliRunner().invoke(cli, ["down", "--sudo", "--name", "roots"])
    assert res.exit_code == 0 and calls == ["down 'roots'"], res.output
