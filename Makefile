# simcluster: `make demo` and `make test` work on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SIMCLUSTER := $(VENV)/bin/simcluster
# Accounting (up --accounting) needs slurmdbd and MariaDB's server binaries; the -core
# packages carry mariadbd without a system database or a service that starts one.
# srun --mpi=pmix needs libpmix.so (libpmix-dev: the plugin loads the unversioned name);
# verify's basic.mpi runs Debian's mpi4py over its Open MPI with the system python3.
APT_PACKAGES := slurmctld slurmd slurm-client munge libnss-wrapper python3-venv procps \
	slurmdbd mariadb-server-core mariadb-client-core \
	libpmix-dev openmpi-bin python3-mpi4py tini
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_NAME ?= demo

.PHONY: setup setup-apt setup-venv setup-docker demo test test-unit test-integration test-docker bench soak bench-faults clean

setup: setup-apt setup-venv  ## install Debian packages and .venv with simcluster (quick when done)

setup-apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "apt packages: all present"; fi

# /usr/bin/python3 (not a user's pyenv): the venv must be usable by other users too,
# as the rootless tests run simcluster as an unprivileged user.
# .[train] (torch==2.13.0, deepspeed, megatron-core) lets `simcluster verify` run its
# training suites, .[deploy] (ansible-core, ansible-runner, paramiko) `simcluster deploy`
# and `--ssh`; reinstalled only when pyproject.toml changes, so a second setup is quick.
$(VENV)/.installed: pyproject.toml setup.py
	@test -x $(PY) || /usr/bin/python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test,train,deploy]'
	@touch $@

setup-venv: $(VENV)/.installed

setup-docker:  ## docker.io + debootstrap, and a running dockerd (for the docker backend)
	@bash scripts/ensure-dockerd.sh

demo: setup  ## bring up a 2-node fake-GPU cluster, run a 2-node job, show status, tear down
	@set -e; trap '$(SIMCLUSTER) down --name $(DEMO_NAME) >/dev/null 2>&1 || true' EXIT; \
	$(SIMCLUSTER) up --name $(DEMO_NAME) --nodes 2 --gpus 6,7 --fake-gpus; \
	echo "+ srun -N2 --gres=gpu:1: each task prints its node, its physical GPU and how node1 resolves"; \
	$(SIMCLUSTER) exec --name $(DEMO_NAME) -- srun -N2 --gres=gpu:1 --label \
	  bash -c 'echo "$$SLURMD_NODENAME CUDA_VISIBLE_DEVICES=$$CUDA_VISIBLE_DEVICES MASTER=$$(getent hosts node1)"'; \
	$(SIMCLUSTER) status --name $(DEMO_NAME); \
	$(SIMCLUSTER) down --name $(DEMO_NAME)

test: setup setup-docker  ## the full test suite (real daemons, real dockerd)
	$(PY) -m pytest -q -rs tests

test-docker: setup setup-docker
	$(PY) -m pytest -q -rs tests/docker

test-unit: setup-venv
	$(PY) -m pytest -q tests/unit

test-integration: setup
	$(PY) -m pytest -q -rs tests/integration

bench: setup  ## time up/down for 2..256 nodes, CI speed (test --suite basic, 1000 jobs), write docs/benchmarks*.md
	$(PY) scripts/bench.py --out docs/benchmarks.md
	$(PY) scripts/bench_throughput.py --baseline --out docs/benchmarks-throughput.md

# Not part of `make test`: SOAK_MINUTES (default 30) of random faults against a job
# stream on a 4-node --fast-failure --accounting cluster; writes docs/reliability.md.
SOAK_MINUTES ?= 30
soak: setup  ## random faults for SOAK_MINUTES against a stream of jobs; 0 jobs may be lost
	$(PY) scripts/soak.py --minutes $(SOAK_MINUTES) --out docs/reliability.md

bench-faults: setup  ## repair, stop/start and failure detection times, write docs/benchmarks-faults.md
	$(PY) scripts/bench_faults.py --out docs/benchmarks-faults.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
