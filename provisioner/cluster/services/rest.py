"""Slurm's REST API (rest: true): the cluster's JWT key, slurmrestd, and talking to it.

slurmctld (and slurmdbd) accept JSON Web Tokens as a second auth type, signed with a
per-cluster HS256 key (32 random bytes, mode 0400, owned by SlurmUser) kept with the
cluster's configs. slurmrestd runs with SLURM_JWT=daemon, as a user that is neither root
nor SlurmUser (Slurm refuses both), and forwards each client's token: clients send
X-SLURM-USER-NAME and X-SLURM-USER-TOKEN, tokens come from `scontrol token`.

It listens only where the cluster's own clients are: the controller's address on the
cluster's own network (local as root: the controller's namespace, reached from this host
over the cluster's bridge; docker: the controller container's address), or loopback.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.services import daemons
from provisioner.errors import StartupError

JWT_KEY_FILE = "jwt_hs256.key"  # beside slurm.conf (NodePaths.jwt_key)
JWT_KEY_BYTES = 32  # HS256 wants at least 256 bits


def write_jwt_key(config_dir: Path) -> Path:
    """A fresh random HS256 key in ``config_dir``, mode 0400 from the start (never readable
    by others, not even for a moment), owned by whoever writes the configs (SlurmUser)."""
    key = config_dir / JWT_KEY_FILE
    if key.exists():
        key.unlink()
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(JWT_KEY_BYTES))
    return key


DEFAULT_PORT = 6820  # Slurm's own for slurmrestd (docker: each controller has its own network)
# Debian's Slurm packages make this system user: neither root nor SlurmUser on clusters
# whose daemons run as root. Where it is missing, nobody.
REST_USERS = ("slurm", "nobody")
# Where slurmrestd reads the cluster's config when the user it runs as cannot reach the
# cluster's own directory (the state directory is 0700): bound there in a mount namespace
# of its own, where Slurm looks by default (the host's /etc/slurm is left as it is).
ETC_SLURM = "/etc/slurm"
RESOLV_FILE = "resolv.conf"  # the nodes' own, in the config directory (local backend, own network)
# Where the OpenAPI plugins are (Debian's multiarch directory, then others' layouts).
PLUGIN_GLOBS = ("/usr/lib/*/slurm-wlm/openapi_*.so", "/usr/lib64/slurm/openapi_*.so", "/usr/lib/slurm/openapi_*.so")
_DBD_PLUGIN = re.compile(r"^openapi/(dbv|slurmdbd)")
_VERSION = re.compile(r"/slurm/(v\d+\.\d+\.\d+)/")
ROOTLESS_NOTE = ("rootless: slurmrestd runs as this user (SLURMRESTD_SECURITY=disable_user_check): "
                 "Slurm wants a user of its own, which only root can switch to")


def plugin_names(files: List[str], accounting: bool) -> List[str]:
    """OpenAPI plugin names from their files (openapi_dbv0_0_38.so -> openapi/dbv0.0.38),
    without slurmdbd's where the cluster has no accounting (slurmrestd refuses to start
    with them: "slurm not configured with slurmdbd")."""
    names = []
    for f in files:
        stem = os.path.basename(f.strip())
        if not stem.startswith("openapi_") or not stem.endswith(".so"):
            continue
        name = "openapi/" + re.sub(r"(\d)_(?=\d)", r"\1.", stem[len("openapi_"):-len(".so")])
        if accounting or not _DBD_PLUGIN.match(name):
            names.append(name)
    return sorted(set(names))


def _listen_addr(cluster: Cluster) -> str:
    """Where slurmrestd listens: the controller's address on the cluster's own network as
    the placement says it (local); "" there means the controller machine's own address,
    asked now (a container's address may change when it is started again)."""
    pl = cluster.placement
    if pl.rest_addr:
        return pl.rest_addr
    res = cluster.runner().run(["hostname", "-i"], timeout=10)
    addrs = [a for a in res.stdout.split() if a.count(".") == 3 and not a.startswith("127.")]
    if not res.ok or not addrs:
        raise StartupError("slurmrestd: the controller's address on the cluster's network is unknown",
                           f"`hostname -i` on {cluster.runner().where} said {res.stdout.strip() or res.stderr.strip()!r}")
    return addrs[0]


def _user_args(cluster: Cluster) -> Tuple[List[str], Dict[str, str], str]:
    """(slurmrestd's -u/-g options, extra environment, the user it runs as)."""
    if cluster.placement.daemon_user != "root":
        return [], {"SLURMRESTD_SECURITY": "disable_user_check"}, cluster.placement.daemon_user
    runner = cluster.runner()
    for user in REST_USERS:
        res = runner.run(["id", "-gn", user], timeout=10)
        if res.ok and res.stdout.strip():
            return ["-u", user, "-g", res.stdout.strip()], {}, user
    raise StartupError("slurmrestd needs a user that is neither root nor SlurmUser, and none was found",
                       f"create one: useradd --system {REST_USERS[0]}")


# Started as root, slurmrestd switches to its user and is then no longer dumpable: its
# /proc/PID/environ (where every daemon's liveness check finds the cluster's marker) is
# unreadable without CAP_SYS_PTRACE, which containers lack. So a root shell that lives
# exactly as long as slurmrestd is the daemon recorded: it passes TERM and INT on and
# waits until slurmrestd is gone. Its $0 names the cluster's directory, so that other local
# users, who cannot read root's environments, find it alive by its command line.
SUPERVISOR = ["sh", "-c", 'trap \'kill -TERM "$p" 2>/dev/null\' TERM INT; "$@" & p=$!; '
              'while kill -0 "$p" 2>/dev/null; do wait "$p"; done']


def restd_argv(cluster: Cluster, addr: str) -> Tuple[List[str], Dict[str, str]]:
    """slurmrestd's command line and environment: JWT only (SLURM_JWT=daemon), every
    OpenAPI plugin of the release (slurmdbd's only with accounting), as its own user."""
    runner, p = cluster.runner(), cluster.paths
    user_args, env, user = _user_args(cluster)
    found = runner.run(["sh", "-c", "ls " + " ".join(PLUGIN_GLOBS) + " 2>/dev/null"], timeout=10)
    plugins = plugin_names(found.stdout.split(), cluster.spec.accounting)
    if not plugins:
        raise StartupError("slurmrestd has no OpenAPI plugins here", "install slurmrestd (make setup)")
    conf, prefix = p.slurm_conf, []
    own_resolv = f"{p.etc}/{RESOLV_FILE}"
    if user_args and (runner.exists(own_resolv)
                      or not runner.run(["runuser", "-u", user, "--", "test", "-r", conf], timeout=10).ok):
        # The config is bound at /etc/slurm, for this daemon only (a mount namespace of its
        # own): where the cluster's directory is private, the only way it reads the config;
        # and where the nodes have a resolv.conf of their own, the way it gets that one.
        if not runner.exists(ETC_SLURM):
            raise StartupError(f"slurmrestd (as {user}) cannot read {conf}, and there is no {ETC_SLURM} to "
                               "bind the cluster's config on", f"mkdir {ETC_SLURM}")
        # slurmrestd looks up each client's name: where the cluster's config directory has
        # the nodes' resolv.conf (a network of its own, no name server reachable), it is
        # bound too, or each request would wait for DNS time-outs.
        prefix = [runner.program("unshare"), "--mount", "--propagation", "private", "sh", "-c",
                  f'mount --bind "$0" {ETC_SLURM} && {{ [ ! -f "$0/{RESOLV_FILE}" ] || '
                  f'mount --bind "$0/{RESOLV_FILE}" /etc/resolv.conf; }} && exec "$@"', p.etc]
        conf = f"{ETC_SLURM}/slurm.conf"
    supervisor = [*SUPERVISOR, f"{cluster.state.root}/slurmrestd"] if user_args else []
    argv = [*cluster.placement.controller_prefix, *prefix, *supervisor,
            daemons.program(cluster, "slurmrestd", "slurmrestd"),
            "-f", conf, "-a", "rest_auth/jwt", "-s", ",".join(plugins), *user_args, f"{addr}:{rest_port(cluster)}"]
    # slurmrestd 23.02+ unshares its System V IPC and file table at start, which an
    # unprivileged container refuses (EPERM, a fatal error): that hardening is left out.
    security = ",".join(x for x in (env.pop("SLURMRESTD_SECURITY", ""), "disable_unshare_sysv",
                                    "disable_unshare_files") if x)
    return argv, {"SLURM_JWT": "daemon", **env, "SLURMRESTD_SECURITY": security}


def rest_port(cluster: Cluster) -> int:
    return cluster.placement.rest_port or DEFAULT_PORT


def start_slurmrestd(cluster: Cluster, timeout: float = 20.0) -> None:
    """Start slurmrestd and wait until it listens; its URL goes into the state."""
    addr = _listen_addr(cluster)
    argv, env = restd_argv(cluster, addr)
    # slurmrestd logs to stderr only: that is its log file.
    daemons.start(cluster, "slurmrestd", argv, env=env, output=".log")
    port, runner = rest_port(cluster), cluster.runner()
    daemons.wait_usable(cluster, "slurmrestd", f"listen on {addr}:{port}", lambda: runner.listening(port, addr),
                        timeout)
    cluster.state.rest_url = f"http://{addr}:{port}"


# -- talking to it -------------------------------------------------------------------------

def token(cluster: Cluster, user: Optional[str] = None, lifespan: Optional[int] = None) -> str:
    """A JWT from `scontrol token` (slurmctld signs it with the cluster's key)."""
    argv = ["scontrol", "token"] + ([f"username={user}"] if user else []) + \
        ([f"lifespan={lifespan}"] if lifespan else [])
    res = cluster.client.run(argv, timeout=20)
    for line in res.stdout.splitlines():
        if line.startswith("SLURM_JWT="):
            return line.split("=", 1)[1].strip()
    raise StartupError(f"scontrol token failed: {(res.stderr or res.stdout).strip()[-300:] or f'exit {res.rc}'}",
                       "is the cluster up with --rest? (simcluster status)")


def token_user(tok: str) -> str:
    """The user a JWT was made for (its "sun" claim), read without checking the signature:
    the X-SLURM-USER-NAME that goes with it (newer releases refuse another name)."""
    payload = tok.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sun"]


class RestError(Exception):
    """An HTTP error answer: its status and body."""

    def __init__(self, status: int, body: str, url: str):
        super().__init__(f"HTTP {status} from {url}: {body[:300]}")
        self.status, self.body = status, body


def request(url: str, path: str, user: Optional[str], tok: Optional[str], body: Any = None,
            timeout: float = 20.0) -> Any:
    """One request to slurmrestd (plain urllib, JSON in and out); RestError on an HTTP error."""
    import urllib.error  # lazy: every command imports this module, few send a request (~20 ms)
    import urllib.request  # lazy: the same
    headers = {"Accept": "application/json"}
    if user is not None:
        headers["X-SLURM-USER-NAME"] = user
    if tok is not None:
        headers["X-SLURM-USER-TOKEN"] = tok
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url.rstrip("/") + path, data=data, headers=headers,
                                 method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        raise RestError(exc.code, exc.read().decode(errors="replace"), url + path) from None
    return json.loads(text) if text.strip() else {}


def versions(url: str, user: str, tok: str, timeout: float = 10.0) -> List[str]:
    """The slurmctld API versions slurmrestd serves, oldest first, from its OpenAPI document."""
    doc = request(url, "/openapi/v3", user, tok, timeout=timeout)
    found = {m.group(1) for path in (doc.get("paths") or {}) for m in [_VERSION.search(path)] if m}
    return sorted(found, key=lambda v: tuple(int(x) for x in v[1:].split(".")))


def newest(found: List[str]) -> Optional[str]:
    return found[-1] if found else None


def client_url(cluster: Cluster) -> Optional[str]:
    """slurmrestd's URL as this machine reaches it: the state's, or for a deployed cluster
    through the SSH connection to its controller (ReadOnly.reach_url)."""
    url = cluster.state.rest_url
    reach = getattr(cluster.provider, "reach_url", None)
    return reach(cluster.state, url) if url and reach is not None else url


def health(cluster: Cluster, alive: Dict[str, bool]) -> Dict:
    """What `status` reports about the REST API: slurmrestd alive, its URL, the versions it serves."""
    if not cluster.spec.rest:
        return {"enabled": False, "healthy": True, "alive": None, "url": None, "versions": [], "error": ""}
    ok, url = alive.get("slurmrestd", False), cluster.state.rest_url
    found: List[str] = []
    error = ""
    if ok and url:
        try:
            tok = token(cluster, lifespan=60)
            found = versions(client_url(cluster) or url, token_user(tok), tok)
        except (OSError, ValueError, RestError, StartupError) as exc:
            error = str(exc)[:300]
    return {"enabled": True, "healthy": ok and bool(found), "alive": ok, "url": url, "versions": found,
            "error": error}


def env_lines(cluster: Cluster) -> List[str]:
    """`simcluster env`'s lines for a REST cluster: its URL, and never a token.

    SLURM_JWT in a shell makes every srun there authenticate with JWT, and so every job
    submitted from it (sbatch passes the environment on): slurmd accepts only munge, and
    refuses the step's launch (`auth/jwt(102) not found`). So the token is for the REST
    calls only, from `simcluster token` (docs/rest.md); a SLURM_JWT left by an earlier
    `simcluster env` is unset."""
    if not cluster.spec.rest or not cluster.state.rest_url:
        return []
    return [f"export SLURMRESTD_URL={shlex.quote(cluster.state.rest_url)}", "unset SLURM_JWT"]