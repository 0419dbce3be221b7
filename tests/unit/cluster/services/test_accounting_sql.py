"""The accounting database's text (cluster/services/accounting_sql.py), shared by `up` and the
Ansible roles: the bootstrap SQL, the registration commands, sacctmgr's refusals."""

from __future__ import annotations

from provisioner.cluster.services import accounting_sql as sql


def test_bootstrap_feeds_the_system_tables_in_order_then_the_slurm_user_for_socket_and_tcp():
    text = sql.bootstrap_sql(["-- tables 1", "-- tables 2"], "mysql", "s3cret")
    lines = text.splitlines()
    assert lines[:3] == ["CREATE DATABASE IF NOT EXISTS mysql;", "USE mysql;", "SET @auth_root_socket='mysql';"]
    assert lines.index("-- tables 1") < lines.index("-- tables 2") < lines.index("FLUSH PRIVILEGES;")
    for host in ("localhost", "127.0.0.1"):
        assert f"CREATE USER 'slurm'@'{host}' IDENTIFIED BY 's3cret';" in lines
        assert f"GRANT ALL ON `slurm_acct_db`.* TO 'slurm'@'{host}';" in lines
    assert text.endswith("\n")


def test_register_adds_the_cluster_the_account_and_the_user_with_it_as_default():
    cmds = sql.register_commands("c1", "alice").splitlines()
    assert cmds[0] == "add cluster c1"
    assert cmds[1].startswith("add account simcluster Cluster=c1")
    assert cmds[2] == "add user alice Account=simcluster DefaultAccount=simcluster Cluster=c1"


def test_refused_finds_the_line_sacctmgr_refused_whatever_its_exit_code():
    assert sql.refused(" Adding Cluster(s)\n  Name = c1\n") == ""
    out = " Adding Account(s)\nsacctmgr: error: Unknown option: Bogus=1\n"
    assert sql.refused(out) == "Unknown option: Bogus=1"
    assert sql.refused("  Qos 'gold' doesn't exist") == "Qos 'gold' doesn't exist"


def test_mariadb_11_names_its_sql_files_mariadb_and_the_roles_get_every_constant():
    assert sql.SYSTEM_TABLES_SQL_11 == ("mariadb_system_tables.sql", "mariadb_performance_tables.sql",
                                        "mariadb_system_tables_data.sql")
    consts = sql.constants()
    assert consts["db_name"] == sql.DB_NAME and consts["server_options"] == sql.SERVER_OPTIONS
    assert consts["server_options"] is not sql.SERVER_OPTIONS  # a copy: the roles cannot change ours
