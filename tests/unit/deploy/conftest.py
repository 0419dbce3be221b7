"""Deploy inputs and the roles' templates without any host: they need the `deploy` extra
(ansible-core, ansible-runner, paramiko), like tests/ansible; without it they skip (CI: fail)."""

from tests.ansible.conftest import deploy_extra  # noqa: F401  (autouse, session-scoped)
