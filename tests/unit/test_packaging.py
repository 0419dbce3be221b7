"""The files `up`, `image build` and `deploy` read at run time have one source, the top level
of the checkout (configs/templates/, docker/, ansible/): provisioner/paths.py reads them
there, and the build's package-dir mapping (setup.py) puts every one of them into the
package where an installed copy's paths.py looks. tests/integration/test_wheel.py builds,
installs and runs the real wheel; this is the quick check of the same layout."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import paths
from provisioner.providers.docker.image import CONTEXT_FILES
from tests.conftest import REPO

TEMPLATES = ("slurm.conf.j2", "gres.conf.j2", "cgroup.conf.j2", "slurmdbd.conf.j2", "task_prolog.sh.j2")
PLAYBOOK_FILES = ("site.yml", "ansible.cfg", "inventory.example.ini", "filter_plugins/simcluster.py",
                  "roles/slurm_common/defaults/main.yml", "roles/slurm_common/tasks/render.yml")


def run_time_files(root: Path) -> "list[Path]":
    """What paths.py hands out, under a checkout's top level or a package's data/."""
    return ([root / "configs" / "templates" / t for t in TEMPLATES]
            + [root / "docker" / n for n in CONTEXT_FILES]
            + [root / "ansible" / f for f in PLAYBOOK_FILES])


def source_files(src: str) -> "list[Path]":
    # spank/build is the plugin compiled for this host (make setup-containers): not packaged.
    return sorted(f for f in (REPO / src).rglob("*") if f.is_file() and "__pycache__" not in f.parts
                  and not (src == "spank" and "build" in f.relative_to(REPO / src).parts))


def load_setup_py():
    """setup.py as a module (setup() runs only as __main__, as the build backend runs it)."""
    spec = importlib.util.spec_from_file_location("simcluster_setup", REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built_lib(tmp_path_factory) -> Path:
    """The package as the wheel lays it out: setuptools' build_py into a temporary
    directory (egg-info there too, so the checkout is left as it was)."""
    tmp = tmp_path_factory.mktemp("build")
    proc = subprocess.run([sys.executable, "-W", "ignore", "setup.py", "-q", "egg_info", "-e", str(tmp),
                           "build_py", "-d", str(tmp / "lib")], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    return tmp / "lib"


def test_a_checkout_reads_the_top_level_directories(monkeypatch):
    monkeypatch.delenv("SIMCLUSTER_TEMPLATES", raising=False)
    assert paths.DATA_DIR == REPO
    assert paths.templates_dir() == REPO / "configs" / "templates"
    assert paths.DOCKER_CONTEXT_DIR == REPO / "docker"
    assert paths.PLAYBOOK_DIR == REPO / "ansible"
    missing = [str(f) for f in run_time_files(REPO) if not f.is_file()]
    assert not missing, missing
    # One source: no second copy inside the package in the checkout.
    assert not (REPO / "provisioner" / "data").exists()


def test_the_docker_context_is_exactly_the_files_its_digest_covers():
    """image.py copies CONTEXT_FILES into the build context and hashes them into the
    image's label; a file added to docker/ and left out of both would go unnoticed."""
    assert sorted(p.name for p in (REPO / "docker").iterdir()) == sorted(CONTEXT_FILES)


def test_the_roles_render_the_one_copy_of_the_templates():
    defaults = (REPO / "ansible" / "roles" / "slurm_common" / "defaults" / "main.yml").read_text()
    assert 'slurm_templates_dir: "{{ playbook_dir }}/../configs/templates"' in defaults
    assert (paths.PLAYBOOK_DIR / ".." / "configs" / "templates").resolve() == paths.templates_dir()


def test_the_build_maps_every_run_time_directory_to_where_paths_looks():
    setup = load_setup_py()
    assert sorted(setup.RUN_TIME_DIRS.values()) == sorted(paths.RUN_TIME_DIRS)
    for package, src in setup.RUN_TIME_DIRS.items():
        assert package == "provisioner.data." + src.replace("/", "."), package
    assert paths.PACKAGED_DATA_DIR == Path(paths.__file__).resolve().parent / "data"


def test_the_built_package_carries_every_run_time_file(built_lib):
    data = built_lib / "provisioner" / "data"
    for src in paths.RUN_TIME_DIRS:
        files = source_files(src)
        assert files, src
        for f in files:
            copy = data / src / f.relative_to(REPO / src)
            assert copy.is_file() and copy.read_bytes() == f.read_bytes(), copy
    assert (built_lib / "provisioner" / "workloads" / "torchrun.sbatch").is_file()
    # Templates resolved from the packaged playbook: the same relative path as in the checkout.
    assert (data / "ansible" / ".." / "configs" / "templates" / "slurm.conf.j2").is_file()


def test_an_installed_copy_reads_its_own_data(built_lib, tmp_path):
    """The built package imported from outside any checkout resolves every path into its
    own provisioner/data/, and each file is there."""
    code = ("from provisioner import paths, providers\n"
            "from provisioner.providers.docker import image\n"
            "print(paths.DATA_DIR); print(paths.templates_dir()); print(paths.DOCKER_CONTEXT_DIR);"
            " print(paths.PLAYBOOK_DIR); print(image.context_digest())")
    env = {k: v for k, v in os.environ.items() if k not in ("SIMCLUSTER_TEMPLATES", "PYTHONPATH")}
    env["PYTHONPATH"] = str(built_lib)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
    data_dir, templates, docker, playbook, digest = proc.stdout.split()
    data = built_lib / "provisioner" / "data"
    assert (Path(data_dir), Path(templates), Path(docker), Path(playbook)) == (
        data, data / "configs" / "templates", data / "docker", data / "ansible")
    missing = [str(f) for f in run_time_files(data) if not f.is_file()]
    assert not missing, missing
    # The same files give the same digest, so an image built from a checkout is current
    # for an installed copy and the other way round.
    from provisioner.providers.docker.image import context_digest
    assert digest == context_digest()


def test_the_packaged_filter_plugin_finds_the_spec_parser(built_lib):
    """The roles' filters load provisioner/config/parse.py by path, from ansible/ in a
    checkout and from provisioner/data/ansible/ in an installed package."""
    pytest.importorskip("ansible")
    for plugin, parse in ((REPO / "ansible", REPO / "provisioner"),
                          (built_lib / "provisioner" / "data" / "ansible", built_lib / "provisioner")):
        spec = importlib.util.spec_from_file_location("simcluster_filters", plugin / "filter_plugins" / "simcluster.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module._PARSE == parse / "config" / "parse.py"
        assert module.memory_mb("2G") == 2048 and module.gpu_list("6,7") == [6, 7]
