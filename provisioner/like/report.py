"""What a mirror kept of a production conf, what it dropped and why: one summary line for
`up` and `render`, the full list for -v and render's like-report.txt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from provisioner.like.reader import Where


@dataclass(frozen=True)
class Entry:
    """A setting of the conf: where it was, its key and value, and what became of it."""

    where: Optional[Where]
    key: str
    value: str
    why: str  # kept: what it became; dropped: the reason


@dataclass
class Report:
    """Kept and dropped settings in the order the conf said them, and notes."""

    source: str
    kept: List[Entry] = field(default_factory=list)
    dropped: List[Entry] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def keep(self, where: Optional[Where], key: str, value: str, what: str = "") -> None:
        self.kept.append(Entry(where, key, value, what))

    def drop(self, where: Optional[Where], key: str, value: str, reason: str) -> None:
        self.dropped.append(Entry(where, key, value, reason))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def kept_keys(self) -> List[str]:
        """Each key kept, once, in the conf's order."""
        return list(dict.fromkeys(e.key for e in self.kept))

    def dropped_keys(self) -> Dict[str, str]:
        """{key: reason} of each key dropped, once, in the conf's order (a key kept
        somewhere and dropped elsewhere, such as a filtered value, is listed too)."""
        out: Dict[str, str] = {}
        for e in self.dropped:
            out.setdefault(e.key, e.why)
        return out

    def _head(self) -> str:
        kept = len(self.kept_keys())
        return f"like {self.source}: kept {kept} setting{'' if kept == 1 else 's'}, dropped {len(self.dropped_keys())}"

    def summary(self) -> str:
        """``kept N settings, dropped M: KEY, KEY (reason); KEY (reason)`` in one line."""
        dropped = self.dropped_keys()
        head = self._head()
        if not dropped:
            return head
        by_reason: Dict[str, List[str]] = {}
        for key, why in dropped.items():
            by_reason.setdefault(why, []).append(key)
        return head + ": " + "; ".join(f"{', '.join(keys)} ({why})" for why, keys in by_reason.items())

    def text(self) -> str:
        """The full report: every kept and dropped setting with its file and line, and the notes."""
        lines = [self._head(), "kept:"]
        for e in self.kept:
            lines.append(f"  {e.where or '-'}: {e.key}={e.value}" + (f"  -> {e.why}" if e.why else ""))
        lines.append("dropped:")
        for e in self.dropped:
            lines.append(f"  {e.where or '-'}: {e.key}={e.value}  ({e.why})")
        if self.notes:
            lines.append("notes:")
            lines.extend(f"  {n}" for n in self.notes)
        return "\n".join(lines) + "\n"
