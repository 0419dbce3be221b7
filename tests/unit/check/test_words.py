"""The words of a script's parse tree (provisioner/check/words.py): a word's parts and the
shell that expands them, and the text `bash -c` receives from a quoted string."""

from __future__ import annotations

from provisioner.check.script import BATCH
from provisioner.check.words import WordReader, _Source, _strip_quotes, _unescape_dq, parse_tree


def first_of(text: str, kind: str):
    """The first node of type ``kind`` in ``text``'s tree, and its source."""
    data = text.encode()
    todo = [parse_tree(data).root_node]
    while todo:
        node = todo.pop(0)
        if node.type == kind:
            return node, _Source(data, None, {}, BATCH)
        todo += node.children
    raise AssertionError(f"no {kind} in {text!r}")


class Reader(WordReader):
    def __init__(self):
        self.sentinels = {}


def test_a_word_is_split_into_literal_text_and_variables_with_their_defaults():
    node, src = first_of('echo "rank ${RANK:-0} of $WORLD"\n', "string")
    parts = Reader().word(node, src, BATCH).parts
    assert [(p.kind, p.text) for p in parts] == [("lit", "rank "), ("var", "${RANK:-0}"), ("lit", " of "),
                                                 ("var", "$WORLD")]
    assert parts[1].names == ("RANK",) and parts[1].default == "0" and parts[0].shell == BATCH


def test_bash_c_text_keeps_the_outer_expansions_as_sentinels_and_unescapes_the_rest():
    node, src = first_of('bash -c "echo $HOST \\$SLURM_NODEID"\n', "string")
    reader = Reader()
    text, lines = reader.unquote(node, src)
    assert text == "echo __SCK0__ $SLURM_NODEID" and len(lines) == len(text) and set(lines) == {1}
    assert reader.sentinels[0].text == "$HOST"  # the batch shell expands it, not the task's


def test_quote_helpers():
    assert _unescape_dq('a \\"b\\" \\$X \\\nc') == 'a "b" $X c'
    assert _strip_quotes("'x y'") == "x y" and _strip_quotes("'x") == "'x"
