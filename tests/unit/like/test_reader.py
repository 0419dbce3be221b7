"""Reading slurm.conf the way sites write it: comments, continuations, includes, quotes."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.like.reader import LikeError, read_conf, split_pairs, Where

W = Where("x.conf", 1)


def write(tmp_path: Path, files):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "slurm.conf"


def test_pairs_quotes_spaces_and_values_with_equals():
    pairs = split_pairs('PartitionName=gpu TRESBillingWeights="CPU=1.0,Mem=0.25G" Nodes = n[1-2] '
                        "SchedulerParameters=bf_window=10", W)
    assert pairs == [("PartitionName", "gpu"), ("TRESBillingWeights", "CPU=1.0,Mem=0.25G"),
                     ("Nodes", "n[1-2]"), ("SchedulerParameters", "bf_window=10")]


def test_repeated_keys_are_all_kept_in_order():
    assert split_pairs("SlurmctldHost=a SlurmctldHost=b", W) == [("SlurmctldHost", "a"), ("SlurmctldHost", "b")]


def test_a_word_that_is_not_key_value_names_its_line():
    with pytest.raises(LikeError, match=r"^x.conf:1: 'Default' is not a Key=Value setting"):
        split_pairs("PartitionName=main Default YES", W)


def test_an_unclosed_quote_names_its_line():
    with pytest.raises(LikeError, match=r"x.conf:1: a quote is not closed"):
        split_pairs('NodeName=n1 Features="ib,nvme', W)


def test_comments_continuations_and_blank_lines(tmp_path):
    conf = read_conf(write(tmp_path, {"slurm.conf": (
        "# a comment line\n"
        "\n"
        "NodeName=n1 CPUs=8 \\\n"
        "   RealMemory=1000   # trailing comment\n"
        'NodeName=n2 Features="a#b" # the # inside quotes stays\n'
        "ClusterName=x # old: NodeName=n9 \\\n"
        "NodeName=n3\n")}))
    assert [(str(c.where), c.pairs) for c in conf.lines] == [
        (f"{tmp_path}/slurm.conf:3", [("NodeName", "n1"), ("CPUs", "8"), ("RealMemory", "1000")]),
        (f"{tmp_path}/slurm.conf:5", [("NodeName", "n2"), ("Features", "a#b")]),
        (f"{tmp_path}/slurm.conf:6", [("ClusterName", "x")]),
        (f"{tmp_path}/slurm.conf:7", [("NodeName", "n3")]),
    ]


def test_keys_keep_their_spelling_and_kind_is_lower_case(tmp_path):
    conf = read_conf(write(tmp_path, {"slurm.conf": "NODENAME=n1 procs=4\npartitionname=p Nodes=n1\n"}))
    assert [c.kind for c in conf.lines] == ["nodename", "partitionname"]
    assert conf.lines[0].pairs[1] == ("procs", "4")


def test_include_relative_to_the_file_any_case_and_glob(tmp_path):
    conf = read_conf(write(tmp_path, {
        "slurm.conf": "ClusterName=x\nInclude conf.d/*.conf\ninclude parts.conf\n",
        "conf.d/20-b.conf": "NodeName=b1\n",
        "conf.d/10-a.conf": "NodeName=a1\n",
        "parts.conf": "PartitionName=p Nodes=ALL\n"}))
    assert [c.head for c in conf.lines] == ["x", "a1", "b1", "p"]
    assert conf.lines[1].where.file.endswith("conf.d/10-a.conf") and conf.lines[1].where.line == 1


def test_an_absolute_include_is_found_beside_the_copy(tmp_path):
    conf = read_conf(write(tmp_path, {"slurm.conf": "include /etc/slurm/nodes-xyz.conf\n",
                                      "nodes-xyz.conf": "NodeName=n1\n"}))
    assert [c.head for c in conf.lines] == ["n1"]
    assert "the path is the production host's" in conf.notes[0]


def test_a_missing_include_is_one_line_with_file_and_line(tmp_path):
    path = write(tmp_path, {"slurm.conf": "ClusterName=x\n\ninclude nodes.conf\n"})
    with pytest.raises(LikeError) as err:
        read_conf(path, "prod.conf")
    assert err.value.message == "prod.conf:3: include nodes.conf: no such file"
    assert "copy it beside" in err.value.one_line()


def test_an_include_loop_is_an_error(tmp_path):
    path = write(tmp_path, {"slurm.conf": "include a.conf\n", "a.conf": "include slurm.conf\n"})
    with pytest.raises(LikeError, match="include loop"):
        read_conf(path)


def test_a_missing_or_unreadable_conf(tmp_path):
    with pytest.raises(LikeError, match="does not exist"):
        read_conf(tmp_path / "nope.conf")
    with pytest.raises(LikeError, match="is not a file"):
        read_conf(tmp_path)
    (tmp_path / "bin.conf").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(LikeError, match="not UTF-8"):
        read_conf(tmp_path / "bin.conf")
