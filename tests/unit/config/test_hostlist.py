"""Slurm host lists: expand in Slurm's order, refuse malformed ones, compress back."""

from __future__ import annotations

import pytest

from provisioner.config.hostlist import HostlistError, compress, expand


@pytest.mark.parametrize("expr, names", [
    ("node6", ["node6"]),
    ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("node[1-2],login1", ["node1", "node2", "login1"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("a100-[01-02]", ["a100-01", "a100-02"]),
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ("/dev/nvidia[0-3]", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]),
    # Slurm's hostlist_create separators: commas, blanks and tabs; empty names are skipped.
    ("n1,,n2", ["n1", "n2"]),
    ("n[1-2], m1", ["n1", "n2", "m1"]),
    ("n1\tn2 n3,", ["n1", "n2", "n3"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("a[01-03,10]", ["a01", "a02", "a03", "a10"]),
])
def test_expand(expr, names):
    assert expand(expr) == names


def test_expand_a_production_sized_list():
    names = expand("gpu[001-128]")
    assert len(names) == 128 and names[0] == "gpu001" and names[-1] == "gpu128"


@pytest.mark.parametrize("expr, says", [
    ("gpu[001-008", "not closed"),
    ("gpu001-008]", "without '['"),
    ("n[[1-2]]", "brackets inside brackets"),
    ("n[3-1]", "backwards"),
    ("n[a-b]", "not a list of numbers"),
    ("", "empty host list"),
    ("n[0-99999999]", "more than"),
])
def test_expand_refuses(expr, says):
    with pytest.raises(HostlistError, match=says.replace("[", r"\[")):
        expand(expr)


@pytest.mark.parametrize("names, expr", [
    (["gpu001", "gpu002", "gpu003", "gpu005"], "gpu[001-003,005]"),
    (["node6"], "node6"),
    (["n1", "n2", "login"], "n[1-2],login"),
    (["r1n01", "r1n02"], "r1n[01-02]"),
])
def test_compress(names, expr):
    assert compress(names) == expr
    assert expand(compress(names)) == names
