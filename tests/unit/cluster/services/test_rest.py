"""REST (rest: true) without daemons: the rendered JWT lines, the key, the plugin names,
the job request per API version, the token's user, and `token` on a cluster without REST."""

from __future__ import annotations

import base64
import json
import stat

import pytest

from provisioner.cluster.services import rest
from provisioner.cluster.services.rest import token_user
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.config.validate import validate
from provisioner.errors import ConfigError
from provisioner.nodepaths import NodePaths
from provisioner.paths import ClusterLayout
from provisioner.render import AccountingInputs, RenderInputs, render_all
from provisioner.verify.rest import job_request, refused


def _render(tmp_path, rest_on, accounting=True):
    spec = ClusterSpec(name="c", backend="local",
                       nodes=tuple(NodeSpec(name=f"node{i}", gpus=(), cpus=2, memory=1024) for i in (1, 2)),
                       partitions=(PartitionSpec(name="main", nodes=("node1", "node2"), default=True),),
                       accounting=accounting, rest=rest_on)
    paths = NodePaths.of_layout(ClusterLayout(tmp_path / "c"))
    inputs = RenderInputs(paths=paths, hostname="h", slurm_user="root", controller_port=6817,
                          node_ports={"node1": 6818, "node2": 6819}, accounting=AccountingInputs())
    return paths, render_all(spec, inputs)


def test_jwt_lines_in_slurm_conf_and_slurmdbd_conf_only_with_rest(tmp_path):
    paths, files = _render(tmp_path, True)
    for name in ("slurm.conf", "slurmdbd.conf"):
        assert "AuthAltTypes=auth/jwt\n" in files[name]
        assert f"AuthAltParameters=jwt_key={paths.jwt_key}\n" in files[name]
        assert "AuthType=auth/munge" in files[name]  # munge stays the cluster's own auth
    _, files = _render(tmp_path, False)
    assert not any("AuthAlt" in text for text in files.values())


def test_spec_key_rest_is_a_bool(tmp_path):
    base = {"apiVersion": "simcluster/v1", "name": "c", "nodes": 2}
    assert validate({**base, "rest": True}, 2, 4096).rest and not validate(base, 2, 4096).rest
    with pytest.raises(ConfigError) as exc:
        validate({**base, "rest": "yes"}, 2, 4096)
    assert "rest" in str(exc.value)


def test_jwt_key_is_32_random_bytes_mode_0400(tmp_path):
    key = rest.write_jwt_key(tmp_path)
    first = key.read_bytes()
    assert len(first) == 32 and stat.S_IMODE(key.stat().st_mode) == 0o400
    assert rest.write_jwt_key(tmp_path).read_bytes() != first  # a fresh key each `up`


def test_plugin_names_per_release_and_without_accounting():
    files_2205 = [f"/usr/lib/x86_64-linux-gnu/slurm-wlm/openapi_{p}.so"
                  for p in ("v0_0_36", "v0_0_38", "dbv0_0_38")] + ["/x/rest_auth_jwt.so"]
    assert rest.plugin_names(files_2205, True) == ["openapi/dbv0.0.38", "openapi/v0.0.36", "openapi/v0.0.38"]
    assert rest.plugin_names(files_2205, False) == ["openapi/v0.0.36", "openapi/v0.0.38"]
    files_2411 = ["/usr/lib/aarch64-linux-gnu/slurm-wlm/openapi_slurmctld.so", "/usr/lib/a/slurm-wlm/openapi_slurmdbd.so"]
    assert rest.plugin_names(files_2411, False) == ["openapi/slurmctld"]


def _doc(version, env_type, script_in_job):
    job = {"properties": {"environment": {"type": env_type}, **({"script": {"type": "string"}} if script_in_job else {})}}
    return {"paths": {f"/slurm/{version}/job/submit": {"post": {"requestBody": {"content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/req"}}}}}}},
            "components": {"schemas": {"req": {"properties": {"job": {"$ref": "#/components/schemas/job"}}},
                                       "job": job}}}


def test_job_request_follows_the_versions_schema():
    old = job_request(_doc("v0.0.38", "object", False), "v0.0.38", "S", 2, "/w", {"PATH": "/bin"})
    assert old["script"] == "S" and old["job"]["environment"] == {"PATH": "/bin"}
    # 22.05 runs one node for the array form its schema gives: the string works everywhere.
    assert old["job"]["nodes"] == "2"
    new = job_request(_doc("v0.0.42", "array", True), "v0.0.42", "S", 2, "/w", {"PATH": "/bin"})
    assert "script" not in new and new["job"]["script"] == "S" and new["job"]["environment"] == ["PATH=/bin"]


def test_token_user_reads_the_sun_claim():
    payload = base64.urlsafe_b64encode(json.dumps({"sun": "alice", "exp": 1}).encode()).decode().rstrip("=")
    assert token_user(f"h.{payload}.sig") == "alice"


def test_unreachable_rest_is_an_error_not_a_refusal():
    with pytest.raises(OSError):
        refused("http://127.0.0.1:9", "/slurm/v0.0.38/jobs", None, None)


def test_token_command_refuses_a_cluster_without_rest(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from provisioner.cli.main import cli
    from provisioner import named_clusters
    fake = type("C", (), {"spec": type("S", (), {"rest": False})()})()
    monkeypatch.setattr(named_clusters, "load", lambda name: fake)
    res = CliRunner().invoke(cli, ["token", "--name", "c1"])
    assert res.exit_code == 2 and "has no REST API" in res.output and "Traceback" not in res.output
