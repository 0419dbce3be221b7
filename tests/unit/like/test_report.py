"""The report: one summary line (keys grouped by reason) and the full list."""

from __future__ import annotations

from provisioner.like.reader import Where
from provisioner.like.report import Report


def test_summary_counts_keys_once_and_groups_by_reason():
    r = Report(source="prod.conf")
    r.keep(Where("prod.conf", 1), "SelectType", "select/cons_tres", "slurmConf")
    r.keep(Where("prod.conf", 5), "CPUs", "64")
    r.keep(Where("prod.conf", 6), "CPUs", "32")
    r.drop(Where("prod.conf", 2), "SlurmctldHost", "ctl1", "one machine runs every daemon here")
    r.drop(Where("prod.conf", 3), "BackupController", "ctl2", "one machine runs every daemon here")
    r.drop(Where("prod.conf", 4), "Frob", "1", "unknown key, kept out")
    r.drop(Where("prod.conf", 7), "SlurmctldHost", "ctl3", "one machine runs every daemon here")
    assert r.summary() == ("like prod.conf: kept 2 settings, dropped 3: SlurmctldHost, BackupController (one machine "
                           "runs every daemon here); Frob (unknown key, kept out)")


def test_full_text_has_every_setting_with_its_line_and_the_notes():
    r = Report(source="prod.conf")
    r.keep(Where("nodes.conf", 3), "Gres", "gpu:h100:8")
    r.drop(Where("prod.conf", 9), "Prolog", "/etc/slurm/prolog", "a script of the production hosts")
    r.note("--max-nodes 4: kept 4 of 128 nodes")
    text = r.text()
    assert text.splitlines()[0] == "like prod.conf: kept 1 setting, dropped 1"
    assert "  nodes.conf:3: Gres=gpu:h100:8" in text
    assert "  prod.conf:9: Prolog=/etc/slurm/prolog  (a script of the production hosts)" in text
    assert text.rstrip().endswith("--max-nodes 4: kept 4 of 128 nodes")


def test_nothing_dropped():
    assert Report(source="x").summary() == "like x: kept 0 settings, dropped 0"
