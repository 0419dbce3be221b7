"""Rendering configs/templates: golden files for fixed specs and inputs, plus the lines
that matter (per-node Port/CPUs/RealMemory/Gres, gres File=, config_overrides, AuthInfo).

Regenerate the golden files after an intended template change with
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/unit/test_render.py
and review the diff under tests/golden/.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path
from typing import Dict

import jinja2
import pytest

from provisioner.config import load_spec
from provisioner.paths import templates_dir
from provisioner.providers.docker.node_containers import CONTAINER_PATHS
from provisioner.render import (TEMPLATES, RenderInputs, _environment, build_context, default_ports,
                                render_all, write_files)
from tests.conftest import REPO, run_cli
from tests.unit.conftest import fixed_inputs, spec_from

GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def seed_spec():
    return load_spec(str(REPO / "configs/examples/node6-node7-one-gpu-each.yaml"), cpus=2, memory_mb=2000)


def fake2_spec():
    return spec_from({"name": "dev", "nodes": 2, "gpus": "6,7", "fakeGpus": True, "cpus": 8,
                      "memory": "16G"})


def partitions_spec():
    return spec_from({
        "name": "big", "nodes": 4, "fakeGpus": 8, "cpus": 64, "memory": "512G", "controllerPort": 20100,
        "partitions": [
            {"name": "batch", "nodes": "ALL", "default": True, "maxTime": "1-00:00:00"},
            {"name": "debug", "nodes": ["node1", "node2"], "maxTime": "30"},
        ],
        "slurmConf": ["MaxJobCount=20000", "PriorityType=priority/multifactor"],
    })


# case name -> (spec, inputs). Fixed host, user, ports and state root: no machine facts.
def cases() -> Dict[str, tuple]:
    seed, fake2, parts = seed_spec(), fake2_spec(), partitions_spec()
    return {
        "seed": (seed, fixed_inputs(seed, root="/state/seed")),
        # A local cluster in namespaces: no libnss_wrapper, each node its own host name.
        "fake2": (fake2, replace(fixed_inputs(fake2, root="/state/fake2", nss=None), node_hostnames=True)),
        "partitions": (parts, fixed_inputs(parts, root="/state/parts", controller_port=20100)),
    }


CASES = ["seed", "fake2", "partitions"]


def rendered(case: str) -> Dict[str, str]:
    spec, inputs = cases()[case]
    return render_all(spec, inputs)


@pytest.mark.parametrize("case", CASES)
def test_golden_files(case):
    files = rendered(case)
    assert set(files) == set(TEMPLATES)
    assert {"slurm.conf", "gres.conf", "cgroup.conf", "task_prolog.sh"} <= set(files)
    case_dir = GOLDEN / case
    if UPDATE:
        case_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (case_dir / name).write_text(text)
    for name, text in files.items():
        golden = case_dir / name
        assert golden.exists(), f"{golden} is missing: run with UPDATE_GOLDEN=1 to create it"
        assert text == golden.read_text(), (
            f"{name} for case '{case}' differs from {golden.relative_to(REPO)}; if the change is "
            "intended, regenerate with UPDATE_GOLDEN=1 and review the diff")


def test_golden_dirs_hold_only_known_cases():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(CASES)


def test_rendering_is_deterministic():
    assert rendered("partitions") == rendered("partitions")


@pytest.mark.parametrize("case", CASES)
def test_no_template_syntax_leaks(case):
    for name, text in rendered(case).items():
        assert "{{" not in text and "{%" not in text and "}}" not in text, name
        assert text.endswith("\n") and not text.endswith("\n\n\n"), name


def lines(text: str):
    return text.splitlines()


def conf_lines(text: str):
    """Lines that are settings (not comments, not blank)."""
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


# -- slurm.conf -------------------------------------------------------------------------

def test_seed_nodes_advertise_the_production_shape():
    conf = rendered("seed")["slurm.conf"]
    # One line for the two alike nodes, as production confs write them (config/nodelines.py).
    assert ("NodeName=node[6-7] NodeHostname=simhost NodeAddr=127.0.0.1 Port=[17016-17017] CPUs=112 "
            "RealMemory=240000 Gres=gpu:1 State=UNKNOWN") in lines(conf)
    assert "PartitionName=gpu Nodes=node[6-7] Default=YES MaxTime=INFINITE State=UP" in lines(conf)
    assert "DefMemPerCPU=2142" in lines(conf)  # 240000 // 112


def test_every_setting_line_is_key_value():
    for case in CASES:
        for line in conf_lines(rendered(case)["slurm.conf"]):
            assert "=" in line.split()[0], f"{case}: {line!r}"


def test_one_host_many_slurmd_settings():
    conf = rendered("seed")["slurm.conf"]
    settings = dict(line.split("=", 1) for line in conf_lines(conf) if not line.startswith(("NodeName=",
                                                                                          "PartitionName=")))
    assert settings["SlurmdParameters"] == "config_overrides"
    assert settings["AuthInfo"] == "socket=/state/seed/munge/munge.socket"
    assert settings["TaskProlog"] == "/state/seed/etc/task_prolog.sh"
    assert settings["SlurmctldHost"] == "simhost(127.0.0.1)"
    assert settings["SlurmctldPort"] == "6817"
    assert settings["SlurmUser"] == settings["SlurmdUser"] == "slurm"
    assert settings["StateSaveLocation"] == "/state/seed/slurmctld"
    # Several slurmd on one host need their own spool, pid and log files.
    for key in ("SlurmdSpoolDir", "SlurmdPidFile", "SlurmdLogFile"):
        assert "%n" in settings[key], key
    assert settings["GresTypes"] == "gpu"
    assert settings["SelectTypeParameters"] == "CR_Core_Memory"
    assert settings["ProctrackType"] == "proctrack/linuxproc"


def test_default_node_ports_and_controller_port():
    spec, inputs = cases()["partitions"]
    assert default_ports(spec) == {"node1": 6818, "node2": 6819, "node3": 6820, "node4": 6821}
    conf = render_all(spec, inputs)["slurm.conf"]
    assert "SlurmctldPort=20100" in lines(conf)
    node_lines = [line for line in lines(conf) if line.startswith("NodeName=")]
    assert node_lines == ["NodeName=node[1-4] NodeHostname=simhost NodeAddr=127.0.0.1 Port=[6818-6821] CPUs=64 "
                          "RealMemory=524288 Gres=gpu:2 State=UNKNOWN"]


def test_partitions_and_extra_lines():
    conf = rendered("partitions")["slurm.conf"]
    assert "PartitionName=batch Nodes=node[1-4] Default=YES MaxTime=1-00:00:00 State=UP" in lines(conf)
    assert "PartitionName=debug Nodes=node[1-2] Default=NO MaxTime=30 State=UP" in lines(conf)
    assert sum("Default=YES" in line for line in lines(conf)) == 1
    assert conf_lines(conf)[-2:] == ["MaxJobCount=20000", "PriorityType=priority/multifactor"]
    assert "# Extra lines from the cluster spec (slurmConf)" in conf
    assert "slurmConf" not in rendered("seed")["slurm.conf"]


def test_nodes_without_gpus_have_no_gres():
    spec = spec_from({"nodes": [{"name": "g", "gpus": [0]}, {"name": "c"}]})
    files = render_all(spec, fixed_inputs(spec))
    node_lines = [line for line in lines(files["slurm.conf"]) if line.startswith("NodeName=")]
    assert "Gres=gpu:1" in node_lines[0] and "Gres" not in node_lines[1]
    assert conf_lines(files["gres.conf"]) == ["NodeName=g Name=gpu File=/dev/nvidia0"]
    spec = spec_from({"nodes": 2})
    assert conf_lines(render_all(spec, fixed_inputs(spec))["gres.conf"]) == []


def test_docker_style_inputs_use_node_names_as_hosts():
    spec = fake2_spec()
    inputs = RenderInputs(paths=CONTAINER_PATHS, hostname="ctl", slurm_user="slurm",
                          controller_port=6817, node_ports={"node1": 6818, "node2": 6818},
                          nodes_are_hosts=True, controller_addr=None, task_prolog=False)
    files = render_all(spec, inputs)
    assert "task_prolog.sh" not in files
    conf = files["slurm.conf"]
    assert "SlurmctldHost=ctl" in lines(conf)
    assert any(line.startswith("NodeName=node[1-2] NodeHostname=node[1-2] NodeAddr=node[1-2] Port=6818 ")
               for line in lines(conf))
    assert "TaskProlog" not in "\n".join(conf_lines(conf))
    assert "AuthInfo" not in conf


def test_nodes_with_their_own_host_names_say_so():
    """In namespaces each node's host name is its node name: NodeHostname must be that (srun's
    host is matched among them), while NodeAddr stays the address that reaches the node."""
    spec = spec_from({"nodes": [{"name": "node6"}, {"name": "node7"}, {"name": "gpu-a01"}]})
    inputs = replace(fixed_inputs(spec, nss=None), node_addrs={"node6": "198.18.4.2", "node7": "198.18.4.3",
                                                              "gpu-a01": "198.18.4.4"}, node_hostnames=True)
    node_lines = [line for line in lines(render_all(spec, inputs)["slurm.conf"]) if line.startswith("NodeName=")]
    assert [line.split()[:3] for line in node_lines] == [
        ["NodeName=node[6-7]", "NodeHostname=node[6-7]", "NodeAddr=198.18.4.[2-3]"],
        ["NodeName=gpu-a01", "NodeHostname=gpu-a01", "NodeAddr=198.18.4.4"]]
    # Nodes that share this host's name (libnss_wrapper) keep it.
    shared = render_all(spec, replace(inputs, node_hostnames=False))["slurm.conf"]
    assert "NodeName=node[6-7] NodeHostname=simhost NodeAddr=198.18.4.[2-3] " in shared


def test_srun_port_range_where_the_provider_forwards_it():
    """Local as root: srun's ports (which the controller's namespace passes on to this host)
    are fixed in slurm.conf; a slurmConf line of the spec wins; none elsewhere."""
    spec = fake2_spec()
    inputs = replace(fixed_inputs(spec, nss=None), srun_port_range="60001-63000")
    assert "SrunPortRange=60001-63000" in lines(render_all(spec, inputs)["slurm.conf"])
    assert "SrunPortRange" not in rendered("fake2")["slurm.conf"]
    own = spec_from({"name": "dev", "nodes": 2, "slurmConf": ["SrunPortRange=50000-50100"]})
    conf = render_all(own, replace(fixed_inputs(own, nss=None), srun_port_range="60001-63000"))["slurm.conf"]
    assert [line for line in conf_lines(conf) if line.startswith("SrunPortRange=")] == ["SrunPortRange=50000-50100"]


# -- gres.conf, cgroup.conf -------------------------------------------------------------

def test_gres_real_gpus_point_at_dev():
    assert conf_lines(rendered("seed")["gres.conf"]) == [
        "NodeName=node6 Name=gpu File=/dev/nvidia6",
        "NodeName=node7 Name=gpu File=/dev/nvidia7",
    ]


def test_gres_fake_gpus_point_at_the_clusters_own_dev_dir():
    assert conf_lines(rendered("fake2")["gres.conf"]) == [
        "NodeName=node1 Name=gpu File=/state/fake2/dev/nvidia6",
        "NodeName=node2 Name=gpu File=/state/fake2/dev/nvidia7",
    ]
    gres = conf_lines(rendered("partitions")["gres.conf"])
    assert gres[:2] == ["NodeName=node1 Name=gpu File=/state/parts/dev/nvidia0",
                        "NodeName=node1 Name=gpu File=/state/parts/dev/nvidia1"]
    assert len(gres) == 8


def test_cgroup_conf():
    text = rendered("seed")["cgroup.conf"]
    assert 'cluster "node6-node7"' in text
    assert "ConstrainDevices=yes" in conf_lines(text)


# -- the environment: StrictUndefined, files on disk ------------------------------------

def test_every_template_needs_its_variables():
    spec, inputs = cases()["seed"]
    env = _environment()
    ctx = build_context(spec, inputs)
    for template in TEMPLATES.values():
        broken = {k: v for k, v in ctx.items() if k != "cluster_name"}
        with pytest.raises(jinja2.UndefinedError):
            env.get_template(template).render(**broken)


def test_a_missing_variable_in_a_template_raises(tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(templates_dir(), templates)
    gres = templates / "gres.conf.j2"
    gres.write_text(gres.read_text() + "{{ no_such_variable }}\n")
    monkeypatch.setenv("SIMCLUSTER_TEMPLATES", str(templates))
    spec, inputs = cases()["seed"]
    with pytest.raises(jinja2.UndefinedError, match="no_such_variable"):
        render_all(spec, inputs)
    gres.write_text(gres.read_text().replace("{{ no_such_variable }}", "{{ nodes[0].no_such_attr }}"))
    with pytest.raises(jinja2.UndefinedError, match="no_such_attr"):
        render_all(spec, inputs)


def test_write_files_makes_the_prolog_executable(tmp_path):
    written = write_files(rendered("seed"), tmp_path / "out")
    assert sorted(p.name for p in written) == sorted(TEMPLATES)
    assert (tmp_path / "out" / "task_prolog.sh").stat().st_mode & stat.S_IXUSR
    assert not (tmp_path / "out" / "slurm.conf").stat().st_mode & stat.S_IXUSR


def test_render_command_writes_the_seed_configs(tmp_path):
    home = tmp_path / "home"
    out = tmp_path / "out"
    proc = run_cli(["render", "--config", "configs/examples/node6-node7-one-gpu-each.yaml", "--out", str(out)], home)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(TEMPLATES)
    conf = (out / "slurm.conf").read_text()
    assert any(line.startswith("NodeName=node[6-7] ") and " Port=[17016-17017] CPUs=112 RealMemory=240000 Gres=gpu:1 " in line
               for line in lines(conf))
    assert f"AuthInfo=socket={home.resolve()}/node6-node7/munge/munge.socket" in lines(conf)
    assert (out / "task_prolog.sh").stat().st_mode & stat.S_IXUSR
    assert not home.exists() or not any(home.iterdir())  # render starts and creates nothing


def test_cpu_binding_only_where_nodes_advertise_the_cpus_the_host_has():
    spec = fake2_spec()  # 8 CPUs per node
    def plugin(host_cpus):
        inputs = replace(fixed_inputs(spec, root="/state/fake2"), host_cpus=host_cpus)
        return build_context(spec, inputs)["task_plugin"]
    assert plugin(8) == "task/affinity" and plugin(64) == "task/affinity"
    assert plugin(2) == "task/none"  # a simulated shape: CPU 7 does not exist here
    assert plugin(None) == "task/none"  # unknown machine (simcluster render)


def test_gpu_tres_only_with_slurmdbd():
    """slurmctld 22.05 exits ("slurmdbd is required to run with TRES gres/gpu") when the
    TRES is asked for without slurmdbd: it is tracked exactly when accounting is on."""
    conf = rendered("fake2")["slurm.conf"]
    assert "AccountingStorageType=accounting_storage/none" in conf
    assert "AccountingStorageTRES" not in conf
    spec = spec_from({"name": "acct", "nodes": 2, "fakeGpus": 2, "accounting": True})
    assert "AccountingStorageTRES=gres/gpu" in render_all(spec, fixed_inputs(spec, root="/state/acct"))["slurm.conf"]


def test_each_node_has_its_own_tmpfs_and_mpi_stays_on_loopback():
    files = rendered("fake2")
    assert "TmpFS=/state/fake2/tmp/%n" in files["slurm.conf"]
    assert 'OMPI_MCA_btl=${OMPI_MCA_btl:-self,tcp}"' in files["task_prolog.sh"]
    spec, inputs = cases()["fake2"]
    # containers: /tmp and the network are each node's own
    files = render_all(spec, replace(inputs, nodes_are_hosts=True))
    assert "TmpFS" not in files["slurm.conf"] and "OMPI_MCA" not in files["task_prolog.sh"]


def test_no_op_epilog_unless_the_spec_sets_one():
    # Without an Epilog, slurmctld starts the next job only on its once-a-second pass
    # (docs/benchmarks-throughput.md); a spec's own Epilog= line replaces ours.
    conf = rendered("fake2")["slurm.conf"]
    assert [x for x in conf_lines(conf) if x.startswith("Epilog=")] == ["Epilog=/bin/true"]
    spec = spec_from({"nodes": 1, "slurmConf": ["Epilog = /opt/site/epilog.sh"]})
    conf = render_all(spec, fixed_inputs(spec))["slurm.conf"]
    assert [x for x in conf_lines(conf) if x.replace(" ", "").startswith("Epilog=")] == \
        ["Epilog = /opt/site/epilog.sh"]


def test_gres_per_node_has_each_nodes_lines_only():
    from provisioner.render import gres_per_node
    spec, inputs = cases()["partitions"]
    full = [line for line in lines(render_all(spec, inputs)["gres.conf"]) if line.startswith("NodeName=")]
    own = gres_per_node(spec, inputs)
    assert sorted(own) == ["node1", "node2", "node3", "node4"]
    assert [line for line in lines(own["node3"]) if line.startswith("NodeName=")] == \
        [line for line in full if line.startswith("NodeName=node3 ")]
    # Together they are the cluster's gres.conf, line for line.
    assert sorted(line for text in own.values() for line in lines(text) if line.startswith("NodeName=")) == sorted(full)


def test_gres_per_node_names_every_node_one_without_gpus_gets_no_lines():
    from provisioner.render import gres_per_node
    spec = spec_from({"name": "mix", "nodes": [{"name": "gpu1", "gpus": [0]}, {"name": "cpu1"}]})
    own = gres_per_node(spec, fixed_inputs(spec))
    assert sorted(own) == ["cpu1", "gpu1"] and "NodeName=" not in own["cpu1"] and "NodeName=gpu1 " in own["gpu1"]
