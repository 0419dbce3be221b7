"""A cgroup v2 device program that denies a node the GPUs of the other nodes.

On cgroup v2 devices are allowed or denied by eBPF programs (BPF_PROG_TYPE_CGROUP_DEVICE)
attached to cgroups; there is no devices.deny file as on v1. Slurm attaches its own to
each job and step (ConstrainDevices: the node's GPUs the job was not given); this one,
attached to a node's cgroup with BPF_F_ALLOW_MULTI, runs too for everything below it, and
an open() succeeds only where every program lets it. It denies character devices of one
major (the GPUs') with the given minors and lets everything else through.

Made with the bpf(2) system call through ctypes, no compiler or library: the program is a
dozen instructions. It stays attached after this process exits (an attachment holds the
program) and goes with the cgroup. Linux on x86_64 and arm64.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from pathlib import Path
from typing import List

_SYSCALL = {"x86_64": 321, "aarch64": 280}
BPF_PROG_LOAD, BPF_PROG_ATTACH, BPF_PROG_DETACH, BPF_PROG_GET_FD_BY_ID, BPF_PROG_QUERY = 5, 8, 9, 13, 16
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6  # the attach type
BPF_F_ALLOW_MULTI = 2
BPF_DEVCG_DEV_CHAR = 2
ATTR_SIZE = 128  # what we pass of union bpf_attr (the rest zero; the kernel reads what it knows)
PROG_NAME = b"simcluster_dev"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: bytes, out=None) -> int:
    """bpf(``cmd``, ``attr``); ``out``, a ctypes buffer, gets the attr back (the kernel
    writes results into it)."""
    nr = _SYSCALL.get(platform.machine())
    if nr is None:
        raise OSError(0, f"bpf(2) on {platform.machine()} is not known here")
    buf = out if out is not None else ctypes.create_string_buffer(ATTR_SIZE)
    ctypes.memmove(buf, attr, len(attr))
    ret = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), buf, ctypes.c_uint(ATTR_SIZE))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(major: int, minors: List[int]) -> bytes:
    """The instructions: deny char device ``major``:m for m in ``minors``, allow the rest.
    The context (struct bpf_cgroup_dev_ctx) is access_type (type in the low 16 bits),
    major, minor: three u32 at offsets 0, 4 and 8; r0 is the verdict (1 allows)."""
    ldx_w, and32_k, jne_k, jeq_k, mov64_k, exit_ = 0x61, 0x54, 0x55, 0x15, 0xb7, 0x95
    m = len(minors)
    allow = 6 + m  # the index of "r0 = 1"
    code = [_insn(ldx_w, 2, 1, 0), _insn(and32_k, 2, imm=0xFFFF), _insn(jne_k, 2, off=allow - 3, imm=BPF_DEVCG_DEV_CHAR),
            _insn(ldx_w, 4, 1, 4), _insn(jne_k, 4, off=allow - 5, imm=major), _insn(ldx_w, 5, 1, 8)]
    for i, minor in enumerate(minors):
        pc = 6 + i
        code.append(_insn(jeq_k, 5, off=(allow + 2) - pc - 1, imm=minor))
    code += [_insn(mov64_k, 0, imm=1), _insn(exit_), _insn(mov64_k, 0, imm=0), _insn(exit_)]
    return b"".join(code)


def _load(insns: bytes) -> int:
    text = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = struct.pack("<IIQQIIQII16s", BPF_PROG_TYPE_CGROUP_DEVICE, len(insns) // 8, ctypes.addressof(text),
                       ctypes.addressof(license_), 1, len(log), ctypes.addressof(log), 0, 0, PROG_NAME)
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror}: {log.value.decode(errors='replace')[-300:]}")


def attached(cgroup_fd: int) -> List[int]:
    """Ids of the device programs attached to this very cgroup (not its ancestors')."""
    ids = (ctypes.c_uint32 * 64)()
    buf = ctypes.create_string_buffer(ATTR_SIZE)
    _bpf(BPF_PROG_QUERY, struct.pack("<IIIIQI", cgroup_fd, BPF_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), 64), buf)
    count = struct.unpack_from("<I", buf.raw, 24)[0]
    return list(ids[:count])


def deny(cgroup: Path, major: int, minors: List[int]) -> None:
    """Make ``cgroup``'s device program the one that denies ``major``:``minors`` (none: no
    program): the new one is attached first, then those attached before are detached, so
    no moment lets a denied device through."""
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = attached(fd)
        if minors:
            prog = _load(program(major, sorted(set(minors))))
            try:
                _bpf(BPF_PROG_ATTACH, struct.pack("<IIII", fd, prog, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI))
            finally:
                os.close(prog)
        for prog_id in before:
            old = _bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("<I", prog_id))
            try:
                _bpf(BPF_PROG_DETACH, struct.pack("<III", fd, old, BPF_CGROUP_DEVICE))
            finally:
                os.close(old)
    finally:
        os.close(fd)
