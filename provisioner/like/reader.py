"""Read slurm.conf-style files as Slurm's own parser does, into ``Key=Value`` lines with their place.

The rules are those of Slurm 22.05's src/common/parse_config.c (``_get_next_line``,
``_keyvalue_regex``, ``_parse_include_directive``), so that a conf slurmctld takes is read
here the same way:

- a ``#`` starts a comment unless an odd number of backslashes stands before it (``\\#`` is a
  literal ``#``); quotes do not protect it (``Features="a#b"`` is ``Features="a``, as in Slurm);
- a physical line ending in an odd number of backslashes (blanks after them allowed) is joined
  to the next with nothing in between: the next line's leading blanks are kept, so
  ``Nodes=a[1-8],\\`` + ``b[1-8]`` is the one value ``a[1-8],b[1-8]``; comments go first,
  so a backslash inside a comment continues nothing;
- then every backslash is removed and the character after it taken as it is (``\\\\`` is ``\\``);
- ``Key=Value``: keys are letters, digits, ``_`` and ``.``, in any case; blanks around ``=``;
  ``+=``, ``-=``, ``*=``, ``/=`` are taken as ``=`` (Slurm parses the operator and slurm.conf
  ignores it); a value is ``"..."`` (double quotes, blanks allowed inside) or the characters
  up to the next blank, so a value beginning after blanks (``Nodes= a1``) is ``a1``, and single
  quotes or an unclosed ``"`` are characters of the value;
- ``include FILE`` (any case) at the start of a line: the file's path relative to the
  including file's directory, ``%c`` in it replaced by the ClusterName read so far (lower
  case).

Where Slurm refuses a file and the meaning is still plain, this reader is more lenient:
several global settings on one line, ``Key=`` with no value, blanks before ``include``,
glob patterns in an include (newer Slurm releases expand them), and an absolute include path
of the production host that does not exist here, looked for beside the including file (a copy
of a production conf usually travels as one directory). Every problem is a LikeError of one
line naming the file and line.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from provisioner.errors import UsageError

# Nested includes deeper than this are a loop, or a conf nobody should mirror.
MAX_INCLUDE_DEPTH = 16
# Slurm's keyvalue_pattern, less its "followed by a blank or the end", checked by hand below.
_PAIR = re.compile(r"\s*([A-Za-z0-9_.]+)\s*[-*+/]?=\s*(?:\"([^\"]*)\"(?=\s|$)|(\S+))?")
_INCLUDE = re.compile(r"\s*include(?=\s)", re.IGNORECASE)


class LikeError(UsageError):
    """A production conf simcluster cannot read; the message starts with FILE:LINE."""


@dataclass(frozen=True)
class Where:
    """A line of a conf file, as the user knows it (the path they gave, or an include's)."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class ConfLine:
    """One logical line: its ``Key=Value`` pairs in order (keys as written, values unquoted)."""

    where: Where
    pairs: List[Tuple[str, str]]
    text: str = ""

    @property
    def kind(self) -> str:
        """The first key, lower case: 'nodename', 'partitionname', or a global setting."""
        return self.pairs[0][0].lower()

    @property
    def head(self) -> str:
        """The first value: the node list of a NodeName line, a partition's name ..."""
        return self.pairs[0][1]


@dataclass
class ConfFile:
    """Every line of a conf and the files it read (the top file first)."""

    lines: List[ConfLine] = field(default_factory=list)
    files: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when under it, else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def strip_comment(text: str) -> str:
    """``text`` up to its first ``#`` that an even number of backslashes (or none) precedes."""
    backslashes = 0
    for i, c in enumerate(text):
        if c == "#" and backslashes % 2 == 0:
            return text[:i]
        backslashes = backslashes + 1 if c == "\\" else 0
    return text


def strip_continuation(text: str) -> Optional[str]:
    """``text`` without its continuing backslash, or None when it does not continue.

    Like Slurm's ``_strip_continuation``: blanks after the backslashes are skipped, and only
    an odd number of backslashes continues (``\\\\`` at the end is a literal backslash).
    """
    body = text.rstrip()
    count = len(body) - len(body.rstrip("\\"))
    if count % 2 == 0:
        return None
    return body[:-1]


def strip_escapes(text: str) -> str:
    """Every backslash removed, the character after it kept as it is (``\\\\`` -> ``\\``)."""
    return re.sub(r"\\(.?)", r"\1", text, flags=re.DOTALL)


def split_pairs(text: str, where: Where) -> List[Tuple[str, str]]:
    """``Key=Value`` pairs of one logical line; anything else is a LikeError at ``where``."""
    pairs: List[Tuple[str, str]] = []
    pos, text = 0, text.rstrip()
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _PAIR.match(text, pos)
        if not m:
            rest = text[pos:].split()[0]
            raise LikeError(f"{where}: '{rest}' is not a Key=Value setting",
                            "every setting is Key=Value (a comment starts with #)")
        quoted, plain = m.group(2), m.group(3)
        if quoted is None and plain is None:
            # "Key=" at the end of the line: Slurm refuses it; here it is an empty value.
            value = ""
        else:
            value = quoted if quoted is not None else plain
        pairs.append((m.group(1), value))
        pos = m.end()
    return pairs


def _logical_lines(path: Path, shown: str) -> List[Tuple[Where, str]]:
    """(where, text) of each logical line: comments removed, continuations joined, escapes undone."""
    try:
        raw = path.read_text()
    except UnicodeDecodeError:
        raise LikeError(f"cannot read {shown}: it is not UTF-8 text") from None
    except OSError as exc:
        raise LikeError(f"cannot read {shown}: {exc.strerror or exc}") from None
    out: List[Tuple[Where, str]] = []
    parts: List[str] = []
    start = 0
    # Slurm reads with fgets: lines end at "\n" only (a "\r" before it is a blank).
    physical = raw.split("\n")
    if physical and physical[-1] == "":
        physical.pop()
    for n, line in enumerate(physical, 1):
        if not parts:
            start = n
        text = strip_comment(line)
        body = strip_continuation(text)
        if body is not None:
            parts.append(body)
            continue
        parts.append(text)
        joined = strip_escapes("".join(parts))
        parts = []
        if joined.strip():
            out.append((Where(shown, start), joined))
    if parts:
        joined = strip_escapes("".join(parts))
        if joined.strip():
            out.append((Where(shown, start), joined))
    return out


def _matches(cand: Path) -> List[str]:
    if glob.has_magic(str(cand)):
        return sorted(glob.glob(str(cand)))
    return [str(cand)] if cand.is_file() else []


def _include_targets(arg: str, including: Path, where: Where, conf: ConfFile,
                     cluster_name: Optional[str]) -> List[Path]:
    words = arg.split()
    if not words:
        raise LikeError(f"{where}: include names no file", "write 'include nodes.conf'")
    if len(words) > 1:
        raise LikeError(f"{where}: include {arg.strip()}: one file per include line (Slurm takes the first word "
                        f"and refuses the rest)", "put each file on an include line of its own")
    target = words[0]
    if "%c" in target:
        if cluster_name is None:
            raise LikeError(f"{where}: include {target}: %c stands for the ClusterName, and no ClusterName line "
                            "comes before it", "set ClusterName= before the include line")
        target = target.replace("%c", cluster_name.lower())
    # Slurm: an include's path is relative to the directory of the file that names it.
    found = _matches(Path(target) if os.path.isabs(target) else including.parent / target)
    if found:
        return [Path(f) for f in found]
    if os.path.isabs(target):
        # A production conf names /etc/slurm/nodes.conf; its copy lies beside the copied slurm.conf.
        found = _matches(including.parent / Path(target).name)
        if found:
            conf.notes.append(f"{where}: include {target} read from {display_path(Path(found[0]).parent)}/ "
                              "(the path is the production host's)")
            return [Path(f) for f in found]
    raise LikeError(f"{where}: include {target}: no such file",
                    f"copy it beside {display_path(including)} or fix the path")


def read_conf(path: Path, shown: Optional[str] = None) -> ConfFile:
    """Read ``path`` and every file it includes into one ConfFile."""
    conf = ConfFile()
    top = Path(path)
    if not top.is_file():
        raise LikeError(f"{shown or path} does not exist" if not top.exists() else f"{shown or path} is not a file",
                        "give --like the path of a slurm.conf")
    _read_into(conf, top, shown or display_path(top), [])
    return conf


def _cluster_name(conf: ConfFile) -> Optional[str]:
    """The ClusterName read so far (the last one, as Slurm keeps it), for ``%c`` in includes."""
    name = None
    for line in conf.lines:
        for key, value in line.pairs:
            if key.lower() == "clustername":
                name = value
    return name


def _read_into(conf: ConfFile, path: Path, shown: str, stack: List[str]) -> None:
    real = os.path.realpath(path)
    if real in stack or len(stack) >= MAX_INCLUDE_DEPTH:
        raise LikeError(f"{shown}: included again from itself (an include loop)", "remove the loop of includes")
    conf.files.append(shown)
    for where, text in _logical_lines(path, shown):
        m = _INCLUDE.match(text)
        if m:
            for target in _include_targets(text[m.end():], path, where, conf, _cluster_name(conf)):
                _read_into(conf, target, display_path(target), stack + [real])
            continue
        conf.lines.append(ConfLine(where=where, pairs=split_pairs(text, where), text=text.strip()))


# Values of slurm.conf lines, as the mapping reads them.
SLURM_WORDS = ("INFINITE", "UNLIMITED")


def line_name(line: ConfLine, key: str, what: str, fix: str) -> str:
    """The name a NodeName/PartitionName line gives; LikeError where it gives none. ("NodeName=
    CPUs=8": Slurm takes the word after the blanks as the value, a node named "CPUs=8".)"""
    head = line.head.strip()
    if not head or re.match(r"[A-Za-z0-9_.]+=", head):
        raise LikeError(f"{line.where}: {key} line has no name"
                        + (f" (Slurm would name the {what} '{head}')" if head else ""), fix)
    return head


def int_value(where: Where, key: str, value: str) -> int:
    if not value.strip().isdecimal():
        raise LikeError(f"{where}: {key}={value} is not a whole number")
    return int(value)


def one_value(value: str) -> str:
    """A value as one token: spaces after commas (quoted lists) go."""
    return re.sub(r"\s*,\s*", ",", value.strip())


def time_value(value: str) -> str:
    return value.upper() if value.upper() in SLURM_WORDS else value
