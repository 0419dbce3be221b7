"""`simcluster deploy`: the same cluster description on real hosts, through Ansible.

inventory.py reads and checks the inventory, extravars.py turns a cluster spec into the
playbook's variables, runner.py drives ansible/site.yml through ansible-runner, apply.py
ties them together; remote_status.py and verify_ssh.py look at a deployed cluster over SSH.
"""
