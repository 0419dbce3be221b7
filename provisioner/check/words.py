"""The words of a batch script's parse tree (parse.py walks its statements): the tree-sitter
tree itself, a parsed text with the file line of each byte (`_Source`), a word's parts
(literal text, variables, expansions, each with the shell that expands it), and the text
that `bash -c STRING` receives, rebuilt as bash would hand it on, the outer shell's
expansions kept as sentinels that a re-parse turns back into parts.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Tuple

from provisioner.check.script import Part, Word


_SENTINEL_RE = re.compile(r"__SCK(\d+)__")


def _parser():
    # lazy: tree-sitter loads its grammar only when a script is parsed (not for `simcluster --help`)
    import tree_sitter_bash
    from tree_sitter import Language, Parser
    return Parser(Language(tree_sitter_bash.language()))


_PARSER = None


def parse_tree(data: bytes):
    """The tree-sitter tree of ``data`` (one parser per process)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = _parser()
    return _PARSER.parse(data)


class _Source:
    """A text that was parsed, and for each of its bytes the line of the file it came from."""

    def __init__(self, data: bytes, line_of: Optional[List[int]], sentinels: Dict[int, Part], shell: str):
        self.data = data
        self.shell = shell  # the shell that expands the words of this text
        self.line_of = line_of  # None: the file itself (row + 1)
        self.sentinels = sentinels

    def line(self, node) -> int:
        if self.line_of is None:
            return node.start_point[0] + 1
        b = min(node.start_byte, len(self.line_of) - 1)
        return self.line_of[b] if self.line_of else 1

    def end_line(self, node) -> int:
        if self.line_of is None:
            return node.end_point[0] + 1
        b = min(max(node.end_byte - 1, 0), len(self.line_of) - 1)
        return self.line_of[b] if self.line_of else 1

    def text(self, node) -> str:
        return self.data[node.start_byte:node.end_byte].decode("utf-8", "replace")


class WordReader:
    """The word half of parse.py's walker: ``sentinels`` holds the expansions an outer shell
    made in a `bash -c` string, by number."""

    sentinels: Dict[int, Part]

    def parts(self, node, src: _Source, shell: str) -> List[Part]:
        shell = src.shell  # words are expanded by the shell whose text they are in
        t = node.type
        line = src.line(node)
        if t in ("word", "number", "heredoc_content", "special_variable_name"):
            return self._literal(src.text(node), src, shell, line, unescape=(t == "word"))
        if t == "raw_string":
            return [Part("lit", src.text(node)[1:-1], shell, line)]
        if t == "ansi_c_string":
            return [Part("lit", src.text(node)[2:-1], shell, line)]
        if t in ("string", "translated_string"):
            out: List[Part] = []
            pos = node.start_byte + (2 if t == "translated_string" else 1)
            for child in node.children:
                if child.type in ('"', "$"):
                    continue
                if child.start_byte > pos:  # text tree-sitter did not give a node of its own
                    gap = src.data[pos:child.start_byte].decode("utf-8", "replace")
                    out += self._literal(_unescape_dq(gap), src, shell, line)
                out += self.parts(child, src, shell)
                pos = child.end_byte
            end = node.end_byte - 1
            if end > pos:
                out += self._literal(_unescape_dq(src.data[pos:end].decode("utf-8", "replace")), src, shell, line)
            return out
        if t == "string_content":
            return self._literal(_unescape_dq(src.text(node)), src, shell, line)
        if t == "simple_expansion":
            name = src.text(node)[1:]
            return [Part("var", src.text(node), shell, line, (name,))]
        if t == "expansion":
            names = tuple(src.text(c) for c in node.children if c.type in ("variable_name", "special_variable_name"))
            if not names:
                names = _whole_array(node, src)
            default = None
            kids = list(node.children)
            for i, c in enumerate(kids):
                if c.type in (":-", "-", ":=", "=") and i + 1 < len(kids) and kids[i + 1].type != "}":
                    default = _strip_quotes(src.text(kids[i + 1]))
            return [Part("var", src.text(node), shell, line, names[:1], default)]
        if t in ("arithmetic_expansion", "command_substitution", "process_substitution"):
            names = tuple(sorted(set(_names_in(node, src))))
            return [Part("arith" if t == "arithmetic_expansion" else "cmd", src.text(node), shell, line, names)]
        if t == "concatenation":
            out = []
            for child in node.children:
                out += self.parts(child, src, shell)
            return out
        if t == "array":
            # `ARGS=(--nnodes 2 --node_rank $SLURM_NODEID)`: its elements, one space apart, so that
            # "${ARGS[@]}" is followed like a string variable holding the same words
            out = []
            for child in node.children:
                if child.type in ("(", ")", "comment"):
                    continue
                if out:
                    out.append(Part("lit", " ", shell, src.line(child)))
                out += self.parts(child, src, shell)
            return out
        return self._literal(src.text(node), src, shell, line)

    def _literal(self, text: str, src: _Source, shell: str, line: int, unescape: bool = False) -> List[Part]:
        """Literal text, with sentinels (expansions the outer shell made) turned back into parts."""
        out: List[Part] = []
        pos = 0
        for m in _SENTINEL_RE.finditer(text):
            if m.start() > pos:
                lit = text[pos:m.start()]
                out.append(Part("lit", _unescape_word(lit) if unescape else lit, shell, line))
            out.append(src.sentinels[int(m.group(1))])
            pos = m.end()
        if pos < len(text):
            lit = text[pos:]
            out.append(Part("lit", _unescape_word(lit) if unescape else lit, shell, line))
        return out

    def word(self, node, src: _Source, shell: str) -> Word:
        return Word(self.parts(node, src, shell), src.line(node), _SENTINEL_RE.sub(
            lambda m: src.sentinels[int(m.group(1))].text, src.text(node)))

    def unquote(self, node, src: _Source) -> Tuple[str, List[int]]:
        """The text a `bash -c` receives from ``node``, with the line each character came
        from; expansions this (outer) shell makes become sentinels."""
        out: List[str] = []
        lines: List[int] = []

        def emit(text: str, line: int) -> None:
            out.append(text)
            lines.extend([line] * len(text))

        def sentinel(child) -> None:
            parts = self.parts(child, src, outer_shell)
            for p in parts:
                if p.kind == "lit":
                    emit(p.text, src.line(child))
                else:
                    n = len(self.sentinels)
                    self.sentinels[n] = p
                    emit(f"__SCK{n}__", src.line(child))

        outer_shell = src.shell
        t = node.type
        if t == "raw_string":
            start = node.start_byte + 1
            body = src.data[start:node.end_byte - 1].decode("utf-8", "replace")
            self._emit_mapped(body, start, src, emit)
        elif t == "string":
            pos = node.start_byte + 1
            for child in node.children:
                if child.type in ('"',):
                    continue
                if child.type in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"):
                    if child.start_byte > pos:
                        self._emit_dq(src, pos, child.start_byte, emit)
                    sentinel(child)
                    pos = child.end_byte
            if node.end_byte - 1 > pos:
                self._emit_dq(src, pos, node.end_byte - 1, emit)
        elif t == "concatenation":
            for child in node.children:
                t2, l2 = self.unquote(child, src)
                out.append(t2)
                lines.extend(l2)
        elif t in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"):
            sentinel(node)
        else:
            text = src.text(node)
            self._emit_mapped(_unescape_word(text), node.start_byte, src, emit)
        return "".join(out), lines

    def _emit_mapped(self, text: str, start: int, src: _Source, emit) -> None:
        line = src.line_of[start] if src.line_of else src.data[:start].count(b"\n") + 1
        for ch in text:
            emit(ch, line)
            if ch == "\n":
                line += 1

    def _emit_dq(self, src: _Source, start: int, end: int, emit) -> None:
        """Double-quoted text as bash hands it on: \\$ \\` \\" \\\\ unescaped, \\<newline> dropped."""
        raw = src.data[start:end].decode("utf-8", "replace")
        line = src.line_of[start] if src.line_of else src.data[:start].count(b"\n") + 1
        i = 0
        while i < len(raw):
            ch = raw[i]
            if ch == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\\n':
                if raw[i + 1] == "\n":
                    line += 1
                else:
                    emit(raw[i + 1], line)
                i += 2
                continue
            emit(ch, line)
            if ch == "\n":
                line += 1
            i += 1


def _names_in(node, src: _Source) -> Iterator[str]:
    if node.type == "variable_name":
        yield src.text(node)
    for m in _SENTINEL_RE.finditer(src.text(node)) if node.child_count == 0 else ():
        yield from src.sentinels[int(m.group(1))].names
    for child in node.children:
        yield from _names_in(child, src)


def _whole_array(node, src: _Source) -> Tuple[str, ...]:
    """The array an expansion hands on whole: `${ARGS[@]}`, `${ARGS[*]}` (not an element
    `${ARGS[0]}`, its length `${#ARGS[@]}` or its keys `${!ARGS[@]}`)."""
    kids = list(node.children)
    if any(c.type in ("#", "!") for c in kids[:2]):
        return ()
    for c in kids:
        if c.type == "subscript":
            name = next((src.text(x) for x in c.children if x.type == "variable_name"), None)
            index = [src.text(x) for x in c.children if x.type not in ("variable_name", "[", "]")]
            if name and index in (["@"], ["*"]):
                return (name,)
    return ()


def _unescape_dq(text: str) -> str:
    return re.sub(r'\\([$`"\\])', r"\1", text.replace("\\\n", ""))


def _unescape_word(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.S)


def _strip_quotes(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
