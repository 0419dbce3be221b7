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


def test_an_unclosed_quote_is_a_character_of_the_value_as_in_slurm():
    # Slurm's value regex: "..." or the characters up to the next blank, so '"ib,nvme' is the value.
    assert split_pairs('NodeName=n1 Features="ib,nvme', W) == [("NodeName", "n1"), ("Features", '"ib,nvme')]
    assert split_pairs('NodeName=n1 Features="a"b', W) == [("NodeName", "n1"), ("Features", '"a"b')]
    assert split_pairs("NodeName=n1 Features='a,b'", W) == [("NodeName", "n1"), ("Features", "'a,b'")]


def test_values_after_blanks_operators_and_keys_as_slurm_takes_them():
    assert split_pairs("NodeName = n1  CPUs= 4 RealMemory +=9 Tres.Weight=x", W) == [
        ("NodeName", "n1"), ("CPUs", "4"), ("RealMemory", "9"), ("Tres.Weight", "x")]
    # "Key= Other=v": Slurm skips the blanks after '=' and takes 'Other=v' as the value.
    assert split_pairs("PartitionName=p AllowQos= Nodes=n1", W) == [("PartitionName", "p"), ("AllowQos", "Nodes=n1")]
    assert split_pairs('Features="a b" Gres=', W) == [("Features", "a b"), ("Gres", "")]


def test_comments_continuations_and_blank_lines(tmp_path):
    conf = read_conf(write(tmp_path, {"slurm.conf": (
        "# a comment line\n"
        "\n"
        "NodeName=n1 CPUs=8 \\\n"
        "   RealMemory=1000   # trailing comment\n"
        'NodeName=n2 Features="a#b" # quotes do not protect a # from being a comment, in Slurm either\n'
        "ClusterName=x # old: NodeName=n9 \\\n"
        "NodeName=n3\n")}))
    assert [(str(c.where), c.pairs) for c in conf.lines] == [
        (f"{tmp_path}/slurm.conf:3", [("NodeName", "n1"), ("CPUs", "8"), ("RealMemory", "1000")]),
        (f"{tmp_path}/slurm.conf:5", [("NodeName", "n2"), ("Features", '"a')]),
        (f"{tmp_path}/slurm.conf:6", [("ClusterName", "x")]),
        (f"{tmp_path}/slurm.conf:7", [("NodeName", "n3")]),
    ]


def lines_of(tmp_path, text):
    return [(c.where.line, c.pairs) for c in read_conf(write(tmp_path, {"slurm.conf": text})).lines]


def test_a_continuation_joins_with_nothing_between(tmp_path):
    # The conf: Slurm joins "Nodes=\" "a0[1-8],\" "b0[1-8]" into one value.
    assert lines_of(tmp_path, "PartitionName=p Nodes=\\\na0[1-8],\\\nb0[1-8] Default=YES\n") == [
        (1, [("PartitionName", "p"), ("Nodes", "a0[1-8],b0[1-8]"), ("Default", "YES")])]


def test_the_next_lines_blanks_are_kept(tmp_path):
    with pytest.raises(LikeError, match=r"slurm.conf:1: 'b1' is not a Key=Value setting"):
        read_conf(write(tmp_path, {"slurm.conf": "NodeName=a1,\\\n   b1 CPUs=2\n"}))
    assert lines_of(tmp_path, "NodeName=n1 \\\n  CPUs=2\n") == [(1, [("NodeName", "n1"), ("CPUs", "2")])]


def test_continuation_rules_of_slurm(tmp_path):
    # blanks after the backslash still continue; an even number of backslashes is a literal one
    assert lines_of(tmp_path, "NodeName=n1 \\   \nCPUs=2\nNodeName=n2 Features=a\\\\\nNodeName=n3\n") == [
        (1, [("NodeName", "n1"), ("CPUs", "2")]), (3, [("NodeName", "n2"), ("Features", "a\\")]),
        (4, [("NodeName", "n3")])]
    # a comment line in the middle ends the continued line; a backslash in a comment continues nothing
    assert lines_of(tmp_path, "NodeName=n1 \\\n# note \\\nCPUs=2\n") == [
        (1, [("NodeName", "n1")]), (3, [("CPUs", "2")])]
    # the last line may end in a backslash; CRLF line ends are blanks
    assert lines_of(tmp_path, "NodeName=n1 \\\r\n CPUs=2\r\nNodeName=n2 \\") == [
        (1, [("NodeName", "n1"), ("CPUs", "2")]), (3, [("NodeName", "n2")])]


def test_escapes(tmp_path):
    # \# is a literal #, \\ one backslash, any other escaped character itself
    assert lines_of(tmp_path, "NodeName=n1 Features=ib\\#2,fast # gone\nNodeName=n2 Feat\\ures=a\\\\b\n") == [
        (1, [("NodeName", "n1"), ("Features", "ib#2,fast")]), (2, [("NodeName", "n2"), ("Features", "a\\b")])]


def test_include_rules_of_slurm(tmp_path):
    conf = read_conf(write(tmp_path, {
        "slurm.conf": "ClusterName=Prod\nINCLUDE\tsub/a.conf\ninclude sub/%c.conf\n",
        "sub/a.conf": "include b.conf\n",          # relative to sub/, the including file's directory
        "sub/b.conf": "NodeName=b1\n",
        "sub/prod.conf": "NodeName=p1\n"}))      # %c: the ClusterName, lower case
    assert [c.head for c in conf.lines] == ["Prod", "b1", "p1"]
    with pytest.raises(LikeError, match=r"slurm.conf:1: include %c.conf: %c stands for the ClusterName"):
        read_conf(write(tmp_path, {"slurm.conf": "include %c.conf\nClusterName=x\n"}))
    with pytest.raises(LikeError, match=r"slurm.conf:1: include a.conf b.conf: one file per include line"):
        read_conf(write(tmp_path, {"slurm.conf": "include a.conf b.conf\n"}))
    # "include=x" or "includes x" are not include lines
    with pytest.raises(LikeError, match="not a Key=Value"):
        read_conf(write(tmp_path, {"slurm.conf": "includes x\n"}))


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
