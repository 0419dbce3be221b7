"""`simcluster deploy`: the same cluster description on real hosts, through Ansible.

inventory.py reads and checks the inventory, extravars.py turns a cluster spec into the
playbook's variables, runner.py drives provisioner/data/ansible/site.yml through ansible-runner, apply.py
ties them together. A deployed cluster is looked at over SSH by provisioner/providers/ssh
(`status --ssh`, `verify --ssh`).
"""
