"""GPU lists and memory sizes as users write them (provisioner/config/parse.py)."""

from __future__ import annotations

import pytest

from provisioner.config.parse import parse_gpu_list, parse_memory_mb, split_gpus

# -- parse_gpu_list ---------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("6,7", [6, 7]),
    ("7,6", [7, 6]),  # order is kept: GPUs go to nodes in the order given
    ("0-3", [0, 1, 2, 3]),
    ("0-1,6", [0, 1, 6]),
    ("6, 8-9 ,2", [6, 8, 9, 2]),
    ("3-3", [3]),
    ("5", [5]),
    (" 0 ", [0]),
    ("", []),
    ("255", [255]),
    ([6, 7], [6, 7]),
    ((6, 7), [6, 7]),
    (["0-1", 5, "7"], [0, 1, 5, 7]),
    ([], []),
    (5, [5]),
    (0, [0]),
])
def test_parse_gpu_list(value, expected):
    assert parse_gpu_list(value) == expected


@pytest.mark.parametrize("value, message", [
    ("1,1", "GPU id 1 listed twice"),
    ("0-2,1", "GPU id 1 listed twice"),
    ([3, "3"], "GPU id 3 listed twice"),
    ("3-1", "bad GPU range '3-1': start is after end"),
    ("a,b", "bad GPU id 'a'"),
    ("6,,7", "bad GPU id ''"),
    ("1.5", "bad GPU id '1.5'"),
    ("-1", "bad GPU id '-1'"),
    ("0-", "bad GPU id '0-'"),
    ("0-1-2", "bad GPU id '0-1-2'"),
    ("²", "bad GPU id '²'"),
    ("256", "GPU id 256 out of range 0-255"),
    ("250-260", "GPU id 260 out of range 0-255"),
    ("0-99999999999", "GPU id 99999999999 out of range 0-255"),  # refused before expanding
    ([-1], "GPU id -1 out of range 0-255"),
    (True, "expected GPU ids"),
    (None, "expected GPU ids"),
    ({"a": 1}, "expected GPU ids"),
    (1.0, "expected GPU ids"),
    ([True], "bad GPU id True"),
])
def test_parse_gpu_list_errors(value, message):
    with pytest.raises(ValueError) as info:
        parse_gpu_list(value)
    assert message in str(info.value)


# -- split_gpus -------------------------------------------------------------------------

@pytest.mark.parametrize("gpus, nodes, expected", [
    ([6, 7], 2, [[6], [7]]),
    ([0, 1, 2, 3], 2, [[0, 1], [2, 3]]),
    ([3, 2, 1, 0], 2, [[3, 2], [1, 0]]),
    ([0, 1, 2, 3], 1, [[0, 1, 2, 3]]),
    (list(range(8)), 8, [[i] for i in range(8)]),
    ([], 3, [[], [], []]),
])
def test_split_gpus_evenly_in_order(gpus, nodes, expected):
    assert split_gpus(gpus, nodes) == expected


@pytest.mark.parametrize("gpus, nodes", [([0, 1, 2], 2), (list(range(6)), 4), ([0], 2)])
def test_split_gpus_uneven_is_an_error(gpus, nodes):
    with pytest.raises(ValueError) as info:
        split_gpus(gpus, nodes)
    msg = str(info.value)
    assert f"{len(gpus)} GPUs cannot be split evenly over {nodes} nodes" in msg
    assert f"multiple of {nodes}" in msg


# -- parse_memory_mb --------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (240000, 240000),
    ("240000", 240000),
    ("240G", 240 * 1024),
    ("240g", 240 * 1024),
    ("200GB", 200 * 1024),
    ("1GiB", 1024),
    ("512M", 512),
    ("512MB", 512),
    ("1T", 1024 * 1024),
    ("2048K", 2),
    (" 64 G ", 64 * 1024),
    (1, 1),
])
def test_parse_memory(value, expected):
    assert parse_memory_mb(value) == expected


@pytest.mark.parametrize("value", ["12X", "", "G", "1.5G", "-5", "5 G B", 0, "0", "512K", -1, True, None])
def test_parse_memory_errors(value):
    with pytest.raises(ValueError):
        parse_memory_mb(value)
