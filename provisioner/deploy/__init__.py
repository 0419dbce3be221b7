"""`simcluster deploy`: the same cluster description on real hosts, through Ansible.

inventory.py reads and checks the inventory, extravars.py turns a cluster spec into the
playbook's variables, preflight.py checks that every host's SSH port answers before
Ansible starts, wheelhouse.py collects the wheels `deploy --training` copies to the hosts,
runner.py drives the playbook (ansible/site.yml; provisioner.paths.PLAYBOOK_DIR) through
ansible-runner, and apply.py ties them together. Provisioning real hosts is this
package's alone: a deployed cluster is only looked at afterwards, over SSH, by
provisioner/providers/ssh (`status --ssh`, `verify --ssh`, `export-logs --ssh`).
"""
