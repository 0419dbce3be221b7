"""run_playbook (ansible-runner) for real on this machine with a one-task playbook of the
test's own, no host: a `--check` run shows the file's diff and writes nothing, and the run
after it writes (ansible-runner keeps a run's command line in env/cmdline and used to read
`--check` back into the next deploy)."""

from __future__ import annotations

from pathlib import Path

from provisioner.deploy.playbook import run_playbook

PLAYBOOK = """- hosts: all
  gather_facts: false
  tasks:
    - name: A config file
      ansible.builtin.copy:
        dest: "{{ conf_path }}"
        content: "PartitionName=main\\n{{ extra_line }}"
"""


def test_a_check_shows_the_diff_and_the_next_run_applies(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "site.yml").write_text(PLAYBOOK)
    (project / "ansible.cfg").write_text("[defaults]\n")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("local ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("PartitionName=main\n")
    extravars = {"conf_path": str(conf), "extra_line": "PartitionName=debug\n"}
    private = tmp_path / "runner"
    lines = []

    checked = run_playbook(inventory, extravars, private, lines.append, check=True, diff=True, playbook_dir=project)
    assert checked.rc == 0 and checked.changed == 1, (checked, lines)
    assert [(d.path, d.hosts) for d in checked.diffs] == [(str(conf), ["local"])]
    assert "+PartitionName=debug\n" in checked.diffs[0].render()
    assert conf.read_text() == "PartitionName=main\n"  # a check writes nothing

    applied = run_playbook(inventory, extravars, private, lines.append, playbook_dir=project)
    assert applied.rc == 0 and applied.changed == 1 and applied.diffs == []
    assert conf.read_text() == "PartitionName=main\nPartitionName=debug\n"
    assert not Path(private / "env" / "cmdline").exists()
