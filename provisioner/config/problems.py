"""How a spec's validation reports and the checks every part of it uses: Problems collects every
problem (validate reports them all at once, each with where it is), and the checks of one
value: a whole number in a range, true/false, known keys, a list of mappings, Slurm tokens
and Slurm options."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

from provisioner.config.types import Options


# Node features, GPU types, account and QoS names: what Slurm's parsers take in one token.
TOKEN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")


class Problems:
    """Every problem found, in order, each with where it is: validate raises them all at once."""

    def __init__(self) -> None:
        self.items: List[str] = []

    def add(self, where: str, what: str) -> None:
        self.items.append(f"{where}: {what}" if where else what)


def int_in(p: Problems, where: str, value: Any, lo: int, hi: int) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdecimal():
            value = int(value)
        else:
            p.add(where, f"expected a whole number, got {value!r}")
            return None
    if not lo <= value <= hi:
        p.add(where, f"{value} is out of range {lo}-{hi}")
        return None
    return value


def yes_no(p: Problems, where: str, raw: Dict, key: str) -> bool:
    """A true/false key of ``raw`` (false when absent): a problem, and false, for anything else."""
    value = raw.get(key, False)
    if not isinstance(value, bool):
        p.add(where, f"expected true or false, got {value!r}")
        return False
    return value


def unknown_keys(p: Problems, where: str, d: Dict, allowed: set) -> None:
    for key in sorted(set(d) - allowed, key=str):  # YAML keys need not be strings
        close = [a for a in sorted(allowed) if a.lower() == str(key).lower().replace("_", "")]
        hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(sorted(allowed))})"
        p.add(where, f"unknown key '{key}'{hint}")


def parsed_value(p: "Problems", where: str, raw: Dict, key: str, parse, default):
    """parse(raw[key]), or ``default`` when the key is absent or its value is bad (reported)."""
    if key not in raw:
        return default
    try:
        return parse(raw[key])
    except ValueError as exc:
        p.add(f"{where}.{key}", str(exc))
        return default


def mappings(p: "Problems", items: List[Any], prefix: str, expect: str, keys,
              listing: str = "") -> Iterator[Tuple[int, str, Dict]]:
    """(index, "prefix[i]", entry) for each entry of a YAML list that is a mapping; entries
    that are not, and unknown keys, are reported. With ``listing`` (what the list holds) an
    absent list is empty and anything but a list is reported."""
    if listing and items is None:
        return
    if listing and not isinstance(items, list):
        p.add(prefix, f"expected a list of {listing}")
        return
    for i, entry in enumerate(items):
        where = f"{prefix}[{i}]"
        if not isinstance(entry, dict):
            p.add(where, f"expected a mapping with {expect}, got {entry!r}")
            continue
        unknown_keys(p, where, entry, keys)
        yield i, where, entry


def tokens(p: Problems, where: str, value: Any, what: str) -> Tuple[str, ...]:
    """A list of names (or one comma-separated string) -> a tuple of valid tokens."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        p.add(where, f"expected a list of {what}, got {value!r}")
        return ()
    out = tuple(str(v) for v in value)
    for v in out:
        if not TOKEN_RE.match(v):
            p.add(where, f"{v!r} is not a valid {what[:-1] if what.endswith('s') else what} "
                         "(letters, digits, '_', '.', '+', '-')")
    return out


def slurm_options(p: Problems, where: str, raw: Any, allowed: Tuple[str, ...]) -> Options:
    """A mapping of Slurm options -> ordered (Key, value) pairs in Slurm's spelling of the key."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        p.add(where, f"expected a mapping of Slurm options (Key: value), got {raw!r}")
        return ()
    spelled = {a.lower(): a for a in allowed}
    out: List[Tuple[str, str]] = []
    for key, value in raw.items():
        canon = spelled.get(str(key).lower())
        if canon is None:
            p.add(where, f"unknown option '{key}' (allowed: {', '.join(allowed)})")
            continue
        if isinstance(value, bool):
            value = "YES" if value else "NO"
        if not isinstance(value, (str, int, float)) or not str(value).strip() or any(c.isspace() for c in str(value)):
            p.add(f"{where}.{canon}", f"expected one Slurm value without spaces, got {value!r}")
            continue
        out.append((canon, str(value)))
    return tuple(out)
