"""slurm.conf node lines grouped (provisioner/config/nodelines.py): every line expands, as
Slurm expands it, to exactly the nodes it was made from, in order."""

from provisioner.config.hostlist import expand
from provisioner.config.nodelines import host_list, node_lines


def node(i, **kw):
    addr = f"198.18.{62 + (i + 2) // 256}.{(i + 2) % 256}"
    return dict(dict(name=f"node{i}", hostname="vm", addr=addr, port=20000 + i, cpus=2, memory=100, gpus=[0, 1],
                     gpu_type=None, features=[], options=[]), **kw)


def expanded(lines):
    """Each line's nodes as Slurm pairs them: the i-th name with the i-th value of every
    listed field, or its only value."""
    out = []
    for line in lines:
        names = expand(line["name"])
        fields = {f: expand(str(line[f])) for f in ("hostname", "addr", "port")}
        for f, values in fields.items():
            assert len(values) in (1, len(names)), (f, line)
        for i, name in enumerate(names):
            out.append((name,) + tuple(v[i] if len(v) > 1 else v[0] for v in fields.values()))
    return out


def test_a_thousand_alike_nodes_make_one_line_per_address_block():
    nodes = [node(i) for i in range(1, 1025)]
    lines = node_lines(nodes)
    assert [(ln["name"], ln["addr"], ln["port"]) for ln in lines][:2] == [
        ("node[1-253]", "198.18.62.[3-255]", "[20001-20253]"), ("node[254-509]", "198.18.63.[0-255]", "[20254-20509]")]
    assert len(lines) == 5
    assert expanded(lines) == [(n["name"], "vm", n["addr"], str(n["port"])) for n in nodes]


def test_runs_break_where_a_shape_or_a_sequence_breaks():
    nodes = [node(1), node(2), node(3, cpus=4), node(4, cpus=4), node(6, cpus=4), node(7, cpus=4, port=1)]
    assert [ln["name"] for ln in node_lines(nodes)] == ["node[1-2]", "node[3-4]", "node6", "node7"]


def test_gpu_ids_split_gres_lines_but_not_slurm_conf_lines():
    nodes = [node(1, gpus=[6]), node(2, gpus=[7])]
    assert [ln["name"] for ln in node_lines(nodes)] == ["node1", "node2"]
    assert [ln["name"] for ln in node_lines(nodes, gpu_ids=False)] == ["node[1-2]"]


def test_zero_padding_and_hosts_named_like_their_nodes():
    nodes = [dict(name=f"gpu{i:03d}", hostname=f"gpu{i:03d}", addr=f"gpu{i:03d}", port=6818) for i in (98, 99, 100, 101)]
    [line] = node_lines(nodes)
    assert (line["name"], line["hostname"], line["port"]) == ("gpu[098-101]", "gpu[098-101]", 6818)
    assert expanded([line]) == [(n["name"], n["name"], n["name"], "6818") for n in nodes]
    # An unpadded name after a padded one is another line (gpu9 -> gpu010 is not a range).
    assert len(node_lines([dict(name="gpu9", port=1), dict(name="gpu010", port=1)])) == 2


def test_partition_host_lists_keep_the_order_given():
    assert host_list(["node1", "node2", "node3", "login", "gpu001", "gpu002", "node5"]) == \
        "node[1-3],login,gpu[001-002],node5"
    assert host_list(["node9", "node10"]) == "node[9-10]"
    assert expand(host_list([f"n{i}" for i in range(1, 300)])) == [f"n{i}" for i in range(1, 300)]
