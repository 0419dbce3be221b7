"""Read slurm.conf-style files the way sites write them, into ``Key=Value`` lines with their place.

Handles ``#`` comments (not inside quotes), ``\\`` line continuations, ``include`` lines
(relative to the including file's directory, glob patterns allowed; an absolute path that
does not exist on this machine is looked for beside the including file, since a copy of a
production conf usually travels as one directory), quoted values, spaces around ``=`` and
keys in any case. Every problem is a LikeError of one line naming the file and line.
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
_KEY = r"[A-Za-z][A-Za-z0-9_]*"
# A value: quoted parts and unquoted characters up to the next blank (Slurm's own rule).
_PAIR = re.compile(rf"\s*({_KEY})\s*=(\s*)((?:\"[^\"]*\"|'[^']*'|[^\s\"'])*)")
_NEXT_KEY = re.compile(rf"{_KEY}\s*=")


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


def _strip_comment(text: str, where: Where) -> str:
    quote = None
    for i, c in enumerate(text):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return text[:i]
    return text


def split_pairs(text: str, where: Where) -> List[Tuple[str, str]]:
    """``Key=Value`` pairs of one logical line; anything else is a LikeError at ``where``."""
    pairs: List[Tuple[str, str]] = []
    pos, text = 0, text.rstrip()
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _PAIR.match(text, pos)
        if not m or (m.end() < len(text) and not text[m.end()].isspace()):
            rest = text[pos:].split()[0]
            if rest.count('"') % 2 or rest.count("'") % 2:
                raise LikeError(f"{where}: a quote is not closed in '{rest}'", "close the quote")
            raise LikeError(f"{where}: '{rest}' is not a Key=Value setting",
                            "every setting is Key=Value (a comment starts with #)")
        value = m.group(3)
        if m.group(2) and _NEXT_KEY.match(value):
            # "NodeName= CPUs=8": an empty value, not the value "CPUs=8" (Slurm would take it so)
            pairs.append((m.group(1), ""))
            pos = m.start(3)
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:
            value = value.replace('"', "").replace("'", "")
        pairs.append((m.group(1), value))
        pos = m.end()
    return pairs


def _logical_lines(path: Path, shown: str) -> List[Tuple[Where, str]]:
    """(where, text) of each logical line: comments removed, continuations joined."""
    try:
        raw = path.read_text()
    except UnicodeDecodeError:
        raise LikeError(f"cannot read {shown}: it is not UTF-8 text") from None
    except OSError as exc:
        raise LikeError(f"cannot read {shown}: {exc.strerror or exc}") from None
    out: List[Tuple[Where, str]] = []
    pending: Optional[Tuple[Where, List[str]]] = None
    for n, physical in enumerate(raw.splitlines(), 1):
        where = Where(shown, n)
        # Comments go first: a trailing backslash inside a comment continues nothing.
        text = _strip_comment(physical, where).rstrip()
        continued = text.endswith("\\")
        if continued:
            text = text[:-1]
        if pending is None:
            pending = (where, [text])
        else:
            pending[1].append(text)
        if not continued:
            joined = " ".join(pending[1]).strip()
            if joined:
                out.append((pending[0], joined))
            pending = None
    if pending is not None and " ".join(pending[1]).strip():
        out.append((pending[0], " ".join(pending[1]).strip()))
    return out


def _include_targets(arg: str, including: Path, top_dir: Path, where: Where, conf: ConfFile) -> List[Path]:
    target = arg.strip().strip("\"'")
    if not target:
        raise LikeError(f"{where}: include names no file", "write 'include nodes.conf'")
    candidates = [Path(target)] if os.path.isabs(target) else [including.parent / target, top_dir / target]
    for cand in candidates:
        found = sorted(glob.glob(str(cand))) if glob.has_magic(str(cand)) else ([str(cand)] if cand.is_file() else [])
        if found:
            return [Path(f) for f in found]
    if os.path.isabs(target):
        # A production conf names /etc/slurm/nodes.conf; its copy lies beside the copied slurm.conf.
        local = including.parent / Path(target).name
        found = sorted(glob.glob(str(local))) if glob.has_magic(str(local)) else ([str(local)] if local.is_file() else [])
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
    _read_into(conf, top, shown or display_path(top), top.parent, [])
    return conf


def _read_into(conf: ConfFile, path: Path, shown: str, top_dir: Path, stack: List[str]) -> None:
    real = os.path.realpath(path)
    if real in stack or len(stack) >= MAX_INCLUDE_DEPTH:
        raise LikeError(f"{shown}: included again from itself (an include loop)", "remove the loop of includes")
    conf.files.append(shown)
    for where, text in _logical_lines(path, shown):
        m = re.match(r"^include\s+(.*)$", text, re.IGNORECASE)
        if m and "=" not in text.split()[0]:
            for target in _include_targets(m.group(1), path, top_dir, where, conf):
                _read_into(conf, target, display_path(target), top_dir, stack + [real])
            continue
        conf.lines.append(ConfLine(where=where, pairs=split_pairs(text, where), text=text))
