"""SSHRunner's remote command line (providers/ssh/remote_runners.py)."""

from __future__ import annotations

from provisioner.providers.ssh.remote_runners import remote_command


def test_remote_command_quotes_env_cwd_and_timeout():
    line = remote_command(["sbatch", "a b.sh"], {"ROLE": "x y"}, "/tmp/d ir", 30)
    assert line == "cd '/tmp/d ir' && timeout -k 5 30 env 'ROLE=x y' sbatch 'a b.sh'"
    assert remote_command(["true"]) == "true"
