"""Slurm's REST API on a real local cluster: `up --rest --accounting` runs slurmrestd with JWT.

One cluster for the module (real slurmctld, slurmdbd, MariaDB and slurmrestd): tokens,
`env`, `status`, `verify --suite rest` (a 2-node job over REST, read back from slurmdbd),
no token and a bad token refused, nothing listening on this host's own addresses, and
`down` stops slurmrestd.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.conftest import module_cluster, run_cli, user_shell, wait_for

pytestmark = pytest.mark.integration
NAME = "rest1"


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("slurmrestd as a user of its own needs root (rootless runs it as you; docs/rest.md)")
    with module_cluster(NAME, "--nodes", "2", "--rest", "--accounting") as c:
        yield c


def cli(cluster, *args, check=True):
    return run_cli(list(args) + ["--name", NAME], cluster.home, check=check)


def env_of(cluster):
    lines = cli(cluster, "env").stdout.splitlines()
    return dict(line[len("export "):].split("=", 1) for line in lines if line.startswith("export "))


def get(url, token=None, user="root"):
    headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token} if token else {}
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_token_env_and_status(cluster):
    tok = cli(cluster, "token", "--user", "nobody", "--lifespan", "120").stdout.strip()
    claims = json.loads(base64.urlsafe_b64decode(tok.split(".")[1] + "=="))
    assert claims["sun"] == "nobody" and claims["exp"] - claims["iat"] == 120
    env = env_of(cluster)
    url = env["SLURMRESTD_URL"]
    assert url.startswith("http://") and "0.0.0.0" not in url
    assert "SLURM_JWT" not in env  # srun would authenticate with it (test_env_shell_runs_srun_and_rest)
    code, body = get(f"{url}/slurm/v0.0.38/ping", cli(cluster, "token").stdout.strip())
    assert code == 200 and body["pings"], body
    st = json.loads(cli(cluster, "status", "--json").stdout)
    assert st["healthy"] and st["rest"]["alive"] and st["rest"]["url"] == url
    assert "v0.0.38" in st["rest"]["versions"]
    text = cli(cluster, "status").stdout
    assert "REST API healthy: slurmrestd alive" in text
    key = cluster.root / "etc" / "jwt_hs256.key"
    assert oct(key.stat().st_mode & 0o777) == "0o400" and key.stat().st_size == 32


def test_env_shell_runs_srun_and_rest(cluster, tmp_path):
    """In a shell after `eval "$(simcluster env)"` (one that had a SLURM_JWT exported, as an
    older env gave), a 2-node job submitted from there runs its srun steps (with SLURM_JWT
    in the job's environment slurmd refused them), and a REST call with a token from
    `simcluster token`, as docs/rest.md shows, works from the same shell."""
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/bash\nsrun -N2 hostname\nsrun sleep 2\n")
    out = tmp_path / "steps.out"
    res = user_shell(cluster.home, NAME, f"""
        export SLURM_JWT=left-by-an-older-env
        eval "$(simcluster env --name {NAME})"
        [ -z "${{SLURM_JWT+set}}" ] || {{ echo "SLURM_JWT is still set" >&2; exit 3; }}
        [ -n "$SLURMRESTD_URL" ] || {{ echo "no SLURMRESTD_URL" >&2; exit 4; }}
        sbatch --parsable -N2 -o {out} {script} || exit 5
        USER=${{USER:-$(id -un)}}
        TOKEN=$(simcluster token --name {NAME}) || exit 6
        curl -sSf -H "X-SLURM-USER-NAME: $USER" -H "X-SLURM-USER-TOKEN: $TOKEN" \\
             "$SLURMRESTD_URL/slurm/v0.0.38/ping"
    """)
    assert res.returncode == 0, res.stdout + res.stderr
    job, ping = res.stdout.split("\n", 1)
    assert json.loads(ping)["pings"], ping

    def steps():
        out = cluster.run(["sacct", "-j", job, "-n", "-P", "-o", "JobID,State"], check=False).stdout
        return dict(line.split("|", 1) for line in out.split())
    wait_for("the job and its steps to be recorded", lambda: steps().get(job) not in (None, "PENDING", "RUNNING")
             and f"{job}.1" in steps(), timeout=120)
    assert steps()[job] == steps()[f"{job}.0"] == steps()[f"{job}.1"] == "COMPLETED", (steps(), out.read_text())
    assert sorted(out.read_text().split()) == ["node1", "node2"]


def test_no_token_is_refused(cluster):
    url = env_of(cluster)["SLURMRESTD_URL"]
    code, _ = get(f"{url}/slurm/v0.0.38/jobs")
    assert code == 401


def test_verify_rest_suite(cluster):
    res = cli(cluster, "verify", "--suite", "rest", "--json", check=False)
    report = json.loads(res.stdout)
    rest = [c for c in report["checks"] if c["name"] == "rest.api"]
    assert rest and rest[0]["status"] == "PASS", rest
    assert "slurmdbd" in rest[0]["message"] and "refused" in rest[0]["message"]


def test_nothing_listens_on_host_addresses(cluster):
    """slurmrestd listens only on the cluster's own network: its address is not one of this
    host's own interfaces' (the controller namespace's), and no socket of this host's
    network namespace listens on its port."""
    url = urllib.parse.urlparse(env_of(cluster)["SLURMRESTD_URL"])
    host_addrs = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    assert url.hostname not in host_addrs
    listening = subprocess.run(["ss", "-Htln"], capture_output=True, text=True).stdout
    assert f":{url.port} " not in listening, listening


def test_the_jwt_key_stays_out_of_the_log_bundle(cluster, tmp_path):
    """export-logs copies the cluster's configs, but never a secret: the JWT key (which signs
    any user's token) stays out, as munge's key does; slurmrestd's log is in."""
    assert (cluster.root / "etc" / "jwt_hs256.key").is_file()
    cluster.cli(["export-logs", str(tmp_path / "bundle")], check=True)
    names = [p.name for p in (tmp_path / "bundle").rglob("*") if p.is_file()]
    assert "jwt_hs256.key" not in names and "munge.key" not in names, names
    assert any(n.startswith("slurmrestd") for n in names), names


def test_down_stops_slurmrestd(cluster):
    pid = json.loads((cluster.root / "state.json").read_text())["pids"]["slurmrestd"]
    assert os.path.exists(f"/proc/{pid}")
    cli(cluster, "stop")
    assert not os.path.exists(f"/proc/{pid}") or "slurmrestd" not in open(f"/proc/{pid}/comm").read()
    cli(cluster, "start")
    st = json.loads(cli(cluster, "status", "--json").stdout)
    assert st["rest"]["alive"] and st["rest"]["versions"]
