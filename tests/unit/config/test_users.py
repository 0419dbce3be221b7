"""Clusters for several local users (docs/users.md): the `users` key and --users, the
accounts they get, where root's clusters live and how another user finds them, the checks
`up` makes before anything exists, and liveness seen by a user who cannot read root's
environments."""

from __future__ import annotations

import builtins
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from provisioner import paths
from provisioner import named_clusters
from provisioner.cluster.model import command_runner as runner_mod
from provisioner.cluster.model.state import ClusterState, locked
from provisioner.cluster.services.accounting import spec_commands
from provisioner.config.overrides import spec_overrides
from provisioner.errors import ClusterNotFound, ConfigError, UsageError
from provisioner.paths import ClusterLayout
from provisioner.providers.local.preflight import check_users
from tests.unit.conftest import spec_from

ME = pwd.getpwuid(os.geteuid()).pw_name
# A user of this host other than root (Debian always has some: daemon, nobody ...).
EXISTING = next(p.pw_name for p in pwd.getpwall() if p.pw_uid != 0)


def problems(raw) -> list:
    with pytest.raises(ConfigError) as exc:
        spec_from(raw)
    return exc.value.problems


# ---------------------------------------------------------------- the spec key


def test_users_as_a_list_or_a_comma_string():
    assert spec_from({"users": ["alice", "bob"]}).users == ("alice", "bob")
    assert spec_from({"users": "alice, bob"}).users == ("alice", "bob")
    assert spec_from({}).users == ()
    # --users goes through the same key
    assert spec_overrides(users="alice,bob") == {"users": "alice,bob"}
    assert spec_from({"name": "x", **spec_overrides(users="alice,bob")}).users == ("alice", "bob")


def test_users_round_trip_through_the_state_file_and_older_specs_load():
    spec = spec_from({"users": ["alice"]})
    assert type(spec).from_dict(spec.to_dict()) == spec
    older = spec.to_dict()
    del older["users"]  # a state file written before the key existed
    assert type(spec).from_dict(older).users == ()


@pytest.mark.parametrize("users, expected", [
    (["Alice"], "'Alice' is not a local user name"),
    (["a b"], "'a b' is not a local user name"),
    (["x" * 40], "is not a local user name"),
    (["root"], "'root' uses every cluster already"),
    (["alice", "alice"], "user 'alice' is listed twice"),
    ({"alice": 1}, "expected a list of local user names"),
    ([1], "expected a list of local user names"),
])
def test_bad_users_are_reported(users, expected):
    found = problems({"users": users})
    assert any(p.startswith("users: ") and expected in p for p in found), found


def test_users_are_the_local_backends_only():
    found = problems({"backend": "docker", "users": ["alice"]})
    assert found == ["users: only applies to the local backend: jobs in containers run as the container's root"]


def test_allow_accounts_may_name_a_users_own_account():
    part = {"name": "p", "nodes": "ALL", "options": {"AllowAccounts": "alice"}}
    spec = spec_from({"accounting": True, "users": ["alice"], "partitions": [part]})
    assert spec.partitions[0].option("AllowAccounts") == "alice"
    assert problems({"accounting": True, "partitions": [part]}) == [
        "partitions[0].options.AllowAccounts: 'alice' is not in the spec's accounts (add it there)"]


# ---------------------------------------------------------------- accounts per user


def test_each_user_gets_an_account_of_their_own_as_default():
    spec = spec_from({"name": "c", "accounting": True, "users": ["alice", "bob"]})
    lines = spec_commands(spec, "root", []).splitlines()
    assert lines == [
        "add account alice Cluster=c Parent=root Description=alice Organization=alice QOS=normal",
        "add account bob Cluster=c Parent=root Description=bob Organization=bob QOS=normal",
        "add user alice Account=alice DefaultAccount=alice Cluster=c",
        "add user bob Account=bob DefaultAccount=bob Cluster=c",
    ]


def test_a_spec_account_of_the_users_name_is_theirs_and_listed_accounts_are_joined():
    spec = spec_from({"name": "c", "accounting": True, "users": ["alice", "bob"],
                      "qos": [{"name": "high"}],
                      "accounts": [{"name": "alice", "fairshare": 10}, {"name": "ml", "users": ["bob"]}]})
    lines = spec_commands(spec, "root", []).splitlines()
    assert [line for line in lines if line.startswith("add account")] == [
        "add account alice Cluster=c Parent=root Description=alice Organization=alice QOS=normal,high Fairshare=10",
        "add account ml Cluster=c Parent=root Description=ml Organization=ml QOS=normal,high",
        "add account bob Cluster=c Parent=root Description=bob Organization=bob QOS=normal,high",
    ]
    users = [line for line in lines if line.startswith("add user")]
    assert "add user alice Account=alice DefaultAccount=alice Cluster=c" in users
    # bob is a user of the spec, so known to exist: he joins ml too, his own account first
    assert "add user bob Account=bob,ml DefaultAccount=bob Cluster=c" in users
    assert "add user root Account=alice,ml Cluster=c" in users


# ---------------------------------------------------------------- where clusters live


def test_roots_clusters_live_where_every_user_reaches_them(monkeypatch):
    monkeypatch.delenv("SIMCLUSTER_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert paths.simcluster_home() == Path("/var/lib/simcluster")
    assert paths.shared_home() is None and paths.state_dir_mode() == 0o755
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert paths.simcluster_home() == Path("/xdg/simcluster")
    assert paths.shared_home() == Path("/var/lib/simcluster") and paths.state_dir_mode() == 0o700
    monkeypatch.setenv("SIMCLUSTER_HOME", "/somewhere")
    assert paths.simcluster_home() == Path("/somewhere") and paths.shared_home() is None


def test_shared_umask_only_for_root(monkeypatch):
    old = os.umask(0o077)
    try:
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        with paths.shared_umask():
            assert os.umask(0o022) == 0o022
        assert os.umask(0o077) == 0o077  # restored
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        with paths.shared_umask():
            assert os.umask(0o077) == 0o077
    finally:
        os.umask(old)


def _saved_state(home: Path, name: str, user: str = "root") -> ClusterState:
    layout = ClusterLayout.for_name(name, home)
    layout.root.mkdir(parents=True)
    spec = spec_from({"name": name})
    st = ClusterState(name=name, backend="local", spec=spec.to_dict(), root=str(layout.root), hostname="h",
                      user=user, controller_port=1, node_ports={}, phase="running")
    st.save()
    return st


def test_another_user_finds_roots_cluster_by_name_but_may_not_change_it(tmp_path, monkeypatch):
    own, system = tmp_path / "own", tmp_path / "system"
    monkeypatch.setenv("SIMCLUSTER_HOME", str(own))
    monkeypatch.setattr(named_clusters, "shared_home", lambda: system)
    _saved_state(system, "shared1")
    assert named_clusters.load("shared1").state.root == str(system / "shared1")
    with pytest.raises(UsageError, match=r"cluster 'shared1' is root's .*only root may 'down' it"):
        named_clusters.down("shared1")
    with pytest.raises(UsageError, match=r"only root may 'stop' it"):
        named_clusters.stop("shared1")
    # a cluster of their own of that name comes first
    _saved_state(own, "shared1", user="alice")
    assert named_clusters.load("shared1").state.root == str(own / "shared1")
    monkeypatch.setattr(named_clusters, "shared_home", lambda: None)
    monkeypatch.setattr(named_clusters, "registered_providers", lambda available_only=True: [])
    with pytest.raises(ClusterNotFound, match="no cluster named 'nope'"):
        named_clusters.load("nope")


def test_list_shows_roots_clusters_to_others_marked_shared(tmp_path, monkeypatch):
    own, system = tmp_path / "own", tmp_path / "system"
    monkeypatch.setenv("SIMCLUSTER_HOME", str(own))
    monkeypatch.setattr(named_clusters, "shared_home", lambda: system)
    monkeypatch.setattr(named_clusters, "registered_providers", lambda available_only=True: [])
    _saved_state(system, "rootc")
    _saved_state(own, "mine", user="alice")
    listed = {c["name"]: (c["owner"], c["shared"]) for c in named_clusters.list_clusters(with_shared=True)}
    assert listed == {"mine": ("alice", False), "rootc": ("root", True)}
    # down --all and stop --all look at their own clusters only
    assert [c["name"] for c in named_clusters.list_clusters()] == ["mine"]


def test_a_lock_another_user_cannot_take_says_whose_clusters_they_are(tmp_path, monkeypatch):
    home = tmp_path / "h"
    home.mkdir()
    monkeypatch.setenv("SIMCLUSTER_HOME", str(home))
    real_open = builtins.open

    def refusing(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", refusing)
    with pytest.raises(UsageError, match=rf"the clusters in {home} are {ME}'s: only {ME} may change them"):
        with locked("x"):
            pass


def test_list_names_roots_clusters_left_in_its_old_home(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from provisioner.cli.main import cli
    monkeypatch.delenv("SIMCLUSTER_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(paths, "SYSTEM_HOME", tmp_path / "system")
    monkeypatch.setattr(named_clusters, "registered_providers", lambda available_only=True: [])
    _saved_state(tmp_path / "xdg" / "simcluster", "oldc")
    result = CliRunner().invoke(cli, ["list"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("no clusters")
    old = tmp_path / "xdg" / "simcluster"
    assert f"note: clusters in root's old state directory {old}, which other users cannot reach: oldc" in result.stderr
    assert f"SIMCLUSTER_HOME={old} simcluster down --all" in result.stderr


# ---------------------------------------------------------------- checks before up


def test_a_missing_user_stops_up_with_the_useradd_to_run(tmp_path):
    spec = spec_from({"users": [EXISTING, "no-such-user-sc1", "no-such-user-sc2"]})
    with pytest.raises(UsageError) as exc:
        check_users(spec, ClusterLayout(tmp_path / "c"))
    assert exc.value.message == "users: no local user 'no-such-user-sc1', 'no-such-user-sc2' on this host"
    assert "useradd --create-home no-such-user-sc1; useradd --create-home no-such-user-sc2" in exc.value.hint


def test_users_need_a_cluster_made_by_root(tmp_path, monkeypatch):
    other = next(p.pw_name for p in pwd.getpwall() if p.pw_uid != os.geteuid())
    spec = spec_from({"users": [other]})
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.struct_passwd(("bob", "x", uid, uid, "", "/", "/bin/sh")))
    with pytest.raises(UsageError, match=rf"users: jobs of {other} need a cluster made by root"):
        check_users(spec, ClusterLayout(tmp_path / "c"))


def test_users_must_reach_the_clusters_directory(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the reachability check is made for root's clusters
    spec = spec_from({"users": [EXISTING]})
    top = Path(tempfile.mkdtemp(prefix="sc-users-", dir="/tmp"))  # /tmp: every user enters it
    try:
        top.chmod(0o755)
        private = top / "private"
        private.mkdir()
        private.chmod(0o700)
        with pytest.raises(UsageError, match=rf"other users cannot reach the cluster's directory .* "
                                             rf"\({private} is mode 0700\)"):
            check_users(spec, ClusterLayout(private / "home" / "c"))
        check_users(spec, ClusterLayout(top / "open" / "c"))  # directories `up` makes itself: no complaint
    finally:
        shutil.rmtree(top)


# ---------------------------------------------------------------- liveness as another user


def test_a_daemon_whose_environment_is_unreadable_is_judged_by_its_command_line(monkeypatch):
    pid = os.getpid()
    real_open = builtins.open

    def unreadable_environ(path, *args, **kwargs):
        if str(path) == f"/proc/{pid}/environ":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", unreadable_environ)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    some_dir = os.path.dirname(cmdline[0].decode())  # this process's command line names a path under it
    assert runner_mod.has_marker(pid, f"SIMCLUSTER_STATE_DIR={some_dir}")
    assert not runner_mod.has_marker(pid, "SIMCLUSTER_STATE_DIR=/no/such/cluster")
    assert not runner_mod.has_marker(pid, "SIMCLUSTER_STATE_DIR=")
