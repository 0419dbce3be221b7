"""The docs check: README.md and docs/*.md against the code, so flags, keys, checks, Make
targets, links and named paths cannot drift.

- every relative link resolves, and every `#anchor` names a heading of its page (GitHub's
  rules); every docs page but docs/README.md is linked from another page;
- every YAML key the validator accepts is in docs/config.md, and every key documented
  there is accepted;
- every verify check of the registry is in docs/verify.md, and every check named in its
  tables exists;
- every option of every command (the click tree, groups and subcommands included) is in
  docs/commands.md under that command's heading, and every option listed in a command's
  table exists; the pytest plugin's options are in docs/commands.md and docs/pytest.md,
  and the GitHub Action's inputs (action.yml) in docs/pytest.md;
- every Make target with a `##` comment is in docs/make.md, and every `make TARGET` the
  docs name exists;
- every environment variable of simcluster's own (SIMCLUSTER_*, XDG_*, SSH_*) the code
  reads is in docs/environment.md;
- every docs/PAGE.md#anchor that code, help texts, error hints and scripts name exists;
- every docs/PAGE.md#anchor the CLI prints in its --help texts exists (the rendered help, not
  only the source);
- a page's contents list (a bullet list of links to its own headings) names every section
  of the page, in order, with the heading's own words;
- every `simcluster CMD --flag` (and `CMD --flag`) the docs name is an option of that
  command, and every camelCase spec key written as `key: value` is one the validator accepts;
- no project shorthand or history in user-facing text ("the seeds", "the book chapter",
  "our CI", "our crun runtime", "the 2-core dev machine", "pitfall N", "issue NN", commit ids): the docs,
  --help texts, and the files shipped to users (configs/, examples/, the job scripts verify
  writes);
- every code path the docs name (`provisioner/...`, `configs/...`, `tests/...`, ...) exists,
  and a named symbol (`file.py:name`, `provisioner.module.name`) is defined there.

Fast and daemon-free: it reads files and imports the CLI and the registries. The checkers
are plain functions over text, tested below on synthetic input to prove they can fail.
"""

from __future__ import annotations

import glob
import re
import unicodedata
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def doc_files() -> List[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---------------------------------------------------------------------------- markdown

_FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> Iterable[Tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield i, line


def strip_code_spans(line: str) -> str:
    return re.sub(r"(`+)(.+?)\1", "", line)


def code_spans(line: str) -> List[str]:
    return [m.group(2).strip() for m in re.finditer(r"(`+)(.+?)\1", line)]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: the rendered text (markdown marks and link
    targets dropped), lowercased, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFC", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def headings(text: str) -> List[Tuple[int, str, int]]:
    """(level, heading text, line number) of every ATX heading outside code blocks."""
    out = []
    for n, line in prose_lines(text):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append((len(m.group(1)), m.group(2), n))
    return out


def anchors(text: str) -> Set[str]:
    """Every anchor of a page: heading slugs (duplicates get -1, -2, ...) and HTML ids/names."""
    seen: Dict[str, int] = {}
    result = set()
    for _, title, _ in headings(text):
        slug = github_slug(title)
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        result.add(slug)
    result.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return result


_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(text: str) -> List[Tuple[int, str]]:
    """(line, target) of every inline markdown link outside code blocks and code spans."""
    return [(n, m.group(1)) for n, line in prose_lines(text) for m in _LINK.finditer(strip_code_spans(line))]


def link_problems(page: Path, text: str, anchors_of) -> List[str]:
    """Relative links of ``page`` whose file or #anchor does not exist."""
    problems = []
    for n, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{rel(page)}:{n}"
        if not dest.exists():
            problems.append(f"{where}: link to '{target}': {path_part} does not exist "
                            f"(fix the path, relative to {rel(page.parent) if page.parent != ROOT else 'the top'})")
            continue
        if anchor and dest.suffix == ".md":
            known = anchors_of(dest)
            if anchor not in known:
                close = sorted(a for a in known if anchor.split("-")[0] in a)[:5]
                problems.append(f"{where}: link to '{target}': {rel(dest)} has no heading with anchor "
                                f"'#{anchor}'" + (f" (its anchors include: {', '.join(close)})" if close else ""))
    return problems


def orphan_pages(pages: Sequence[Path], link_targets: Dict[Path, Set[Path]]) -> List[str]:
    """docs pages (docs/README.md aside) that no other page links to."""
    problems = []
    for page in pages:
        if page.parent != DOCS or page.name == "README.md":
            continue
        if not any(page in targets for src, targets in link_targets.items() if src != page):
            problems.append(f"{rel(page)} is linked from no other page: link it from docs/README.md "
                            f"(the docs index) or from the page it belongs to")
    return problems


def linked_files(page: Path, text: str) -> Set[Path]:
    out = set()
    for _, target in links(text):
        path_part = target.partition("#")[0]
        if path_part and not re.match(r"^[a-z][a-z0-9+.-]*:", target):
            out.add((page.parent / path_part).resolve())
    return out


# ------------------------------------------------------------------------------ sections

def section(text: str, match) -> Optional[str]:
    """The text under the first heading for which ``match(title)`` holds, up to the next
    heading of the same or a higher level (its subsections included)."""
    lines = text.splitlines()
    hs = headings(text)
    for i, (level, title, n) in enumerate(hs):
        if match(title):
            end = next((m for lv, _, m in hs[i + 1:] if lv <= level), len(lines) + 1)
            return "\n".join(lines[n - 1:end - 1])
    return None


def own_text(body: str) -> str:
    """A section without its subsections: up to its second heading."""
    hs = headings(body)
    return "\n".join(body.splitlines()[:hs[1][2] - 1]) if len(hs) > 1 else body


def first_code_span(title: str) -> Optional[str]:
    spans = code_spans(title)
    return spans[0] if spans else None


def table_first_cells(text: str) -> List[str]:
    """The first cell of every table row (header and separator rows excluded)."""
    cells = []
    rows = [line for _, line in prose_lines(text) if line.lstrip().startswith("|")]
    for line in rows:
        first = re.split(r"(?<!\\)\|", line.strip())[1].strip()
        if not first or set(first) <= set("-: ") or first.lower() in ("option", "flag", "key", "check", "target",
                                                                      "variable", "command"):
            continue
        cells.append(first)
    return cells


def mentions(text: str, token: str) -> bool:
    """``token`` (a flag like --name or -n) appears as a whole word in ``text``."""
    return re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", text) is not None


# ----------------------------------------------------------------------------------- CLI

def command_tree(cmd: click.Command, path: str = "simcluster") -> Iterable[Tuple[str, click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from command_tree(sub, f"{path} {name}")


def option_names(cmd: click.Command) -> List[str]:
    """Every spelling of every option of ``cmd`` (--help excluded: every command has it)."""
    names = []
    for p in cmd.params:
        if isinstance(p, click.Option):
            names += [o for o in p.opts + p.secondary_opts if o not in ("--help", "-h")]
    return names


def command_doc_problems(doc: str, commands: Sequence[Tuple[str, Sequence[str]]],
                         doc_name: str = "docs/commands.md") -> List[str]:
    """Each command (path, option names) has a heading `` `path` `` in ``doc``, and each of
    its options is mentioned in that section; each option in the first column of the
    section's own tables exists."""
    problems = []
    for path, opts in commands:
        body = section(doc, lambda t, p=path: first_code_span(t) == p)
        if body is None:
            problems.append(f"{doc_name}: no section for `{path}`: add a heading '## `{path}`' with what it does "
                            f"and a table of its options ({', '.join(opts) or 'it has none'})")
            continue
        for opt in opts:
            if not mentions(body, opt):
                problems.append(f"{doc_name}: option {opt} of `{path}` is not documented: add it to the options "
                                f"table under the heading '`{path}`'")
        own = own_text(body)
        for cell in table_first_cells(own):
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*|-[A-Za-z])(?![\w-])", cell):
                if flag not in opts and flag not in ("-h", "--help"):
                    problems.append(f"{doc_name}: `{path}` lists option {flag}, which the command does not have: "
                                    f"remove it or add the option")
    return problems


def cli_commands() -> List[Tuple[str, List[str]]]:
    from provisioner.cli.main import cli
    return [(path, option_names(cmd)) for path, cmd in command_tree(cli)]


def plugin_options() -> List[str]:
    from provisioner import pytest_plugin
    return [f"--simcluster-{name}" for name, _, _ in pytest_plugin._OPTIONS]


# ----------------------------------------------------------------------------- config

def key_doc_problems(doc: str, sections: Dict[str, Set[str]], doc_name: str = "docs/config.md") -> List[str]:
    """``sections``: {heading: keys the validator accepts there}; each key is a row of the
    table under that heading, and each row is an accepted key."""
    problems = []
    for title, accepted in sections.items():
        body = section(doc, lambda t, want=title: t.strip() == want)
        if body is None:
            problems.append(f"{doc_name}: no heading '## {title}': add it with a table of its keys "
                            f"({', '.join(sorted(accepted))})")
            continue
        documented = {c.strip("`") for c in table_first_cells(body) if c.startswith("`")}
        for key in sorted(accepted - documented):
            problems.append(f"{doc_name}: YAML key '{key}' (accepted by provisioner/config/validate.py) is not "
                            f"documented: add a row '| `{key}` | type | default | meaning |' under '## {title}'")
        for key in sorted(documented - accepted):
            problems.append(f"{doc_name}: '## {title}' documents key '{key}', which provisioner/config/validate.py "
                            f"does not accept: remove the row, or accept the key")
    return problems


def validator_key_sections() -> Dict[str, Set[str]]:
    from provisioner.config import validate
    return {"Top-level keys": set(validate.TOP_KEYS), "Node keys": set(validate.NODE_KEYS),
            "Partition keys": set(validate.PARTITION_KEYS)}


# ----------------------------------------------------------------------------- verify

def check_doc_problems(doc: str, checks: Sequence[str], suites: Sequence[str],
                       doc_name: str = "docs/verify.md") -> List[str]:
    """Every registry check is the first cell of a table row in ``doc``; every check-like
    first cell (suite.name) is a registry check."""
    rows = {}
    for cell in table_first_cells(doc):
        m = re.match(r"^`?([a-z]+\.[a-z0-9-]+)`?", cell)
        if m and m.group(1).split(".")[0] in suites:
            rows[m.group(1)] = cell
    problems = [f"{doc_name}: verify check '{c}' (provisioner/verify/suites.py CHECKS) is not documented: add a "
                f"row '| {c} | job | passes when |' to the checks table" for c in checks if c not in rows]
    problems += [f"{doc_name}: the table documents check '{c}', which provisioner/verify/suites.py does not have: "
                 f"remove or rename the row" for c in rows if c not in checks]
    return problems


# ------------------------------------------------------------------------------- make

def make_targets(makefile: str) -> Tuple[Set[str], Set[str]]:
    """(targets with a '##' comment, every target) of a Makefile."""
    documented, every = set(), set()
    for line in makefile.splitlines():
        m = re.match(r"^([A-Za-z0-9][\w.-]*(?:\s+[A-Za-z0-9][\w.-]*)*)\s*:(?!=)([^#]*)(##.*)?$", line)
        if not m:
            continue
        for target in m.group(1).split():
            every.add(target)
            if m.group(3):
                documented.add(target)
    return documented, every


def make_doc_problems(doc: str, documented: Set[str], doc_name: str = "docs/make.md") -> List[str]:
    return [f"{doc_name}: Make target '{t}' (it has a '##' comment in the Makefile) is not documented: add a row "
            f"'| `make {t}` | what it does |'" for t in sorted(documented) if not re.search(
                rf"`make {re.escape(t)}(?:[` ])", doc)]


def unknown_make_targets(page: str, text: str, every: Set[str]) -> List[str]:
    problems = []
    for n, line in prose_lines(text):
        for span in code_spans(line):
            for m in re.finditer(r"(?:^|[;&|(]\s*)make ([a-z][\w-]*)", span):
                if m.group(1) not in every:
                    problems.append(f"{page}:{n}: `make {m.group(1)}` is not a target of the Makefile")
    return problems


# ------------------------------------------------------------------------------ paths

# Made by the build (setup.py maps the top-level directories there), absent in a checkout.
BUILT = ("provisioner/data/",)
PATH_ROOTS = ("provisioner/", "configs/", "ansible/", "docker/", "scripts/", "tests/", "examples/", "docs/", ".ci/")
TOP_FILES = ("Makefile", "action.yml", "setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "CHANGELOG.md")


def _defines(path: Path, name: str) -> bool:
    text = path.read_text(errors="replace")
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]",
                     text, re.M) is not None or (path.suffix != ".py" and name in text)


def path_problem(token: str, root: Path = ROOT) -> Optional[str]:
    """What is wrong with a code path named in the docs, or None. Handles `dir/`, globs,
    `file.py:name`, `file.py::name` and dotted `provisioner.module.name`."""
    token = token.strip().rstrip(".,;)")
    if "<" in token or "$" in token or "{" in token or " " in token:
        return None  # a pattern with placeholders, not a path
    if re.match(r"^provisioner(\.[A-Za-z_]\w*)+$", token):  # a module, maybe with an attribute
        parts = token.split(".")
        for i in range(len(parts), 0, -1):
            base = root.joinpath(*parts[:i])
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    rest = parts[i:]
                    if not rest:
                        return None
                    if len(rest) > 1:
                        return f"no module {'.'.join(parts[:i + 1])}"
                    if len(rest) == 1 and _defines(candidate, rest[0]):
                        return None
                    return f"{rel(candidate)} defines no '{rest[0]}'"
        return f"no module {token}"
    if token.startswith(BUILT) or not (token.startswith(PATH_ROOTS) or token.split(":")[0] in TOP_FILES):
        return None
    file_part, _, symbol = token.replace("::", ":").partition(":")
    file_part = file_part.split("#")[0]
    if any(c in file_part for c in "*?["):
        return None if glob.glob(str(root / file_part)) else f"nothing matches {file_part}"
    target = root / file_part
    if not target.exists():
        return f"{file_part} does not exist"
    symbol = symbol.split("(")[0].strip()
    if symbol and not symbol.isdigit() and target.is_file() and not _defines(target, symbol):
        return f"{file_part} has no '{symbol}'"
    return None


def named_paths(text: str) -> List[Tuple[int, str]]:
    """(line, token) of words in code spans, and paths in the prose, that could name a code
    path (link targets are the link check's)."""
    out = []
    for n, line in prose_lines(text):
        for span in code_spans(line):
            for word in span.split():
                out.append((n, word))
        for m in re.finditer(r"(?<![\w/.$-])((?:provisioner|configs|ansible|docker|scripts|tests|examples)"
                             r"/[\w./-]*\.(?:py|sh|yml|yaml|j2|ini|cfg|toml|slurm|sbatch|md))\b",
                             strip_code_spans(line)):
            out.append((n, m.group(1)))
    return out


def path_problems(page: Path, text: str) -> List[str]:
    problems = []
    for n, token in named_paths(text):
        why = path_problem(token)
        if why:
            problems.append(f"{rel(page)}:{n}: '{token}': {why} (fix the name, or the code)")
    return problems


# ------------------------------------------------------------------------ environment

_ENV_READ = re.compile(r"(?:environ(?:\.get)?|getenv)\s*[(\[]\s*[\"']([A-Z][A-Z0-9_]*)[\"']")
OWN_VARIABLES = ("SIMCLUSTER_", "XDG_", "SSH_")


def env_variables_read(sources: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    """{variable: first file} of simcluster's own variables (SIMCLUSTER_*, XDG_*, SSH_*)
    that ``sources`` ((name, text) pairs) read with os.environ or getenv."""
    found: Dict[str, str] = {}
    for name, text in sources:
        for var in _ENV_READ.findall(text):
            if var.startswith(OWN_VARIABLES):
                found.setdefault(var, name)
    return found


def env_doc_problems(doc: str, read: Dict[str, str], doc_name: str = "docs/environment.md") -> List[str]:
    return [f"{doc_name}: environment variable {var} (read in {where}) is not documented: add a row "
            f"'| `{var}` | used for | default |'" for var, where in sorted(read.items()) if f"`{var}`" not in doc]


# ------------------------------------------------------------------------------- tests

def _fail_if(problems: List[str]) -> None:
    assert not problems, "\n" + "\n".join(problems)


def test_links_and_anchors_resolve():
    cache: Dict[Path, Set[str]] = {}

    def anchors_of(p: Path) -> Set[str]:
        if p not in cache:
            cache[p] = anchors(p.read_text())
        return cache[p]

    problems = []
    for page in doc_files():
        problems += link_problems(page, page.read_text(), anchors_of)
    _fail_if(problems)


def test_every_docs_page_is_linked():
    pages = doc_files()
    _fail_if(orphan_pages(pages, {p: linked_files(p, p.read_text()) for p in pages}))


def test_config_keys_match_the_validator():
    _fail_if(key_doc_problems((DOCS / "config.md").read_text(), validator_key_sections()))


def test_backend_only_keys_name_their_backend():
    from provisioner.config.validate import BACKEND_KEYS
    doc = (DOCS / "config.md").read_text()
    problems = []
    for key, backends in BACKEND_KEYS.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{key}` |")), "")
        problems += [f"docs/config.md: the row of '{key}' must say it applies to the {b} backend only"
                     for b in backends if b not in row]
    _fail_if(problems)


def test_verify_checks_match_the_registry():
    from provisioner.verify.suites import CHECKS, SUITES
    _fail_if(check_doc_problems((DOCS / "verify.md").read_text(), [c.name for c in CHECKS], SUITES))


def test_every_cli_option_is_in_the_command_reference():
    _fail_if(command_doc_problems((DOCS / "commands.md").read_text(), cli_commands()))


def test_pytest_plugin_options_are_documented():
    problems = []
    for page in ("commands.md", "pytest.md"):
        text = (DOCS / page).read_text()
        problems += [f"docs/{page}: pytest option {o} (provisioner/pytest_plugin.py _OPTIONS) is not documented: "
                     f"add a row to its options table" for o in plugin_options() if not mentions(text, o)]
    _fail_if(problems)


def test_action_inputs_are_documented():
    import yaml
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    body = section((DOCS / "pytest.md").read_text(), lambda t: t.strip() == "GitHub Action") or ""
    rows = {c.strip("`") for c in table_first_cells(body)}
    _fail_if([f"docs/pytest.md: input '{name}' of action.yml is not documented: add a row "
              f"'| `{name}` | default | meaning |' to the inputs table under '## GitHub Action'"
              for name in action["inputs"] if name not in rows])


def test_make_targets_are_documented():
    documented, every = make_targets((ROOT / "Makefile").read_text())
    problems = make_doc_problems((DOCS / "make.md").read_text(), documented)
    for page in doc_files():
        problems += unknown_make_targets(rel(page), page.read_text(), every)
    _fail_if(problems)


def test_environment_variables_are_documented():
    sources = [(rel(p), p.read_text()) for p in sorted((ROOT / "provisioner").rglob("*.py"))]
    _fail_if(env_doc_problems((DOCS / "environment.md").read_text(), env_variables_read(sources)))


CODE_DIRS = ("provisioner", "scripts", "examples", "configs", "ansible", "docker")


def doc_references(name: str, text: str) -> List[Tuple[str, str, str]]:
    """(where, page, anchor) of every 'docs/PAGE.md#anchor' named in a source file."""
    return [(f"{name}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1), m.group(2) or "")
            for m in re.finditer(r"docs/([A-Za-z0-9_-]+\.md)(?:#([A-Za-z0-9_-]+))?", text)]


def reference_problems(refs: Iterable[Tuple[str, str, str]], anchors_of) -> List[str]:
    problems = []
    for where, page, anchor in refs:
        path = DOCS / page
        if not path.is_file():
            problems.append(f"{where}: names docs/{page}, which does not exist")
        elif anchor and anchor not in anchors_of(path):
            problems.append(f"{where}: names docs/{page}#{anchor}, but docs/{page} has no heading with that "
                            f"anchor (fix the anchor, or the heading)")
    return problems


def test_docs_named_in_code_and_messages_exist():
    """Help texts, error hints, comments and scripts that send users to docs/PAGE.md#anchor."""
    files = [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*")) if p.is_file()
             and p.suffix in (".py", ".sh", ".slurm", ".sbatch", ".yml", ".yaml", ".j2", ".ini", ".cfg", "")]
    files += [ROOT / "Makefile", ROOT / "action.yml"]
    refs = [r for p in files for r in doc_references(rel(p), p.read_text(errors="replace"))]
    _fail_if(reference_problems(refs, lambda p: anchors(p.read_text())))


# Shorthand of the project's own notes and history that users never saw: say what is meant
# instead. A path or a name with a slash, dash or underscore next to the word is a name,
# not shorthand (tests/data/check/seeds/, --seed, manual_seed).
JARGON = re.compile(
    r"\bpitfall \d|(?<![\w/.-])(?:the seeds?\b(?![/_-])|seeds'|seed (?:scripts?|documents?|launcher)\b)"
    r"|\bbook chapter|\bthe chapter's|\bour (?:own )?CI\b|\bdev machine\b|\b(?:this|the|our) (?:project's )?2-core\b"
    r"|\bours?\b"
    r"|\bissues? #?\d+|\b(?:commit|main at|old =|new =) [0-9a-f]{7,40}\b|\((?:[0-9a-f]{7,12})\)"
    r"|(?<![\w/.:-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}(?![\w/.-])", re.I)


def jargon_problems(where: str, text: str) -> List[str]:
    return [f"{where}:{n}: '{m.group(0)}' means nothing to a user: say what is meant (the example scripts, "
            f"the bug itself, the platform), or move the history to docs/dev/" for n, line in enumerate(text.splitlines(), 1)
            for m in JARGON.finditer(line) if not _is_word(m.group(0), line, m.start())]


def _is_word(found: str, line: str, start: int) -> bool:
    """A bare hex match that is an ordinary word or number of the line, not a commit id:
    all letters a-f ('defaced') cannot happen (a digit is required), so only ids that are
    part of a longer token (a UUID, a hash in a URL) are spared here."""
    return bool(re.match(r"[0-9a-f]{7,12}$", found, re.I)) and (line[start + len(found):start + len(found) + 1] == "-"
                                                               or line[max(0, start - 1):start] == "-")


# Files users get and read besides the docs: example specs, example job scripts, the job
# scripts verify writes into their directories, the Ansible roles' inventory example.
SHIPPED = ("configs/examples", "examples", "provisioner/workloads", "ansible/inventory.example.ini")


def shipped_files() -> List[Path]:
    out = []
    for name in SHIPPED:
        path = ROOT / name
        out += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.is_file()
                                              and p.suffix in (".yaml", ".yml", ".sh", ".slurm", ".sbatch", ".py",
                                                               ".md", ".ini", ".json", "")]
    return out


def help_texts() -> List[Tuple[str, str]]:
    """(command path, its whole --help output) of every command, as click renders it."""
    from provisioner.cli.main import cli
    out = []
    for path, cmd in command_tree(cli):
        ctx = click.Context(cmd, info_name=path)
        out.append((path, cmd.get_help(ctx)))
    return out


def test_no_project_shorthand_in_docs_and_help():
    problems = []
    for page in doc_files():
        problems += jargon_problems(rel(page), page.read_text())
    for path, text in help_texts():
        problems += jargon_problems(f"`{path} --help`", text)
    _fail_if(problems)


def test_no_project_shorthand_in_shipped_files():
    problems = []
    for path in shipped_files():
        problems += jargon_problems(rel(path), path.read_text(errors="replace"))
    _fail_if(problems)


def test_docs_the_help_texts_name_exist():
    refs = [r for path, text in help_texts() for r in doc_references(f"`{path} --help`", text)]
    assert any(page == "gpus.md" and anchor == "which-gpu-ids-a-job-sees" for _, page, anchor in refs)
    _fail_if(reference_problems(refs, lambda p: anchors(p.read_text())))


# One explanation of which CUDA_VISIBLE_DEVICES a job sees (it depends on device cgroups),
# and every page that talks about it links there instead of telling it its own way.
GPU_IDS = "gpus.md#which-gpu-ids-a-job-sees"
GPU_IDS_LINKED_FROM = ("README.md", "docs/README.md", "docs/troubleshooting.md", "docs/verify.md",
                       "docs/fidelity.md", "docs/environment.md", "docs/deploy.md")


def test_gpu_numbering_is_explained_once_and_linked():
    assert "which-gpu-ids-a-job-sees" in anchors((DOCS / "gpus.md").read_text())
    problems = [f"{name}: talks about GPU ids in jobs without linking {GPU_IDS}" for name in GPU_IDS_LINKED_FROM
                if GPU_IDS not in (ROOT / name).read_text()]
    up_help = dict(help_texts())["simcluster up"]
    if "docs/" + GPU_IDS not in up_help:
        problems.append(f"`simcluster up --help` talks about GPU ids without naming docs/{GPU_IDS}")
    _fail_if(problems)


# --------------------------------------------------------------------- contents lists

_CONTENTS_ITEM = re.compile(r"^\s*[-*]\s+\[([^\]]+)\]\(#([^)\s]+)\)\s*$")


def contents_problems(page: str, text: str) -> List[str]:
    """A page's contents list (3 or more consecutive bullets that only link to its own
    headings) must list every heading of the level its items name, below the list, in
    order, each item's words being the heading's."""
    lines = text.splitlines()
    blocks, current = [], []
    for n, line in prose_lines(text):
        m = _CONTENTS_ITEM.match(line)
        if m and (not current or current[-1][0] == n - 1):
            current.append((n, m.group(1), m.group(2)))
        else:
            if len(current) >= 3:
                blocks.append(current)
            current = [(n, m.group(1), m.group(2))] if m else []
    if len(current) >= 3:
        blocks.append(current)
    problems = []
    hs = headings(text)
    slugs = {}
    for level, title, n in hs:
        slugs.setdefault(github_slug(title), (level, title, n))
    for block in blocks:
        end = block[-1][0]
        levels = {slugs[a][0] for _, _, a in block if a in slugs}
        for n, words, anchor in block:
            if anchor not in slugs:
                problems.append(f"{page}:{n}: the contents list links to '#{anchor}', which is no heading of the page")
            elif words.strip() != slugs[anchor][1].strip().replace("`", "") and words.strip() != slugs[anchor][1].strip():
                problems.append(f"{page}:{n}: the contents list says '{words}' for the heading "
                                f"'{slugs[anchor][1]}': use the heading's words")
        wanted = [(title, github_slug(title)) for level, title, n in hs if n > end and level in levels]
        listed = [a for _, _, a in block]
        for title, slug in wanted:
            if slug not in listed:
                problems.append(f"{page}: the contents list (line {block[0][0]}) misses the section '{title}': add "
                                f"'- [{title}](#{slug})'")
        order = [a for a in listed if a in [s for _, s in wanted]]
        if order != [s for _, s in wanted if s in order]:
            problems.append(f"{page}: the contents list (line {block[0][0]}) is not in the order of the page's sections")
    return problems


def test_contents_lists_match_the_headings():
    problems = []
    for page in doc_files():
        problems += contents_problems(rel(page), page.read_text())
    _fail_if(problems)


# -------------------------------------------------------- flags and keys the docs name

def _command_options() -> Dict[str, Set[str]]:
    from provisioner.cli.main import cli
    glob_opts = set(option_names(cli))
    return {path: set(option_names(cmd)) | glob_opts for path, cmd in command_tree(cli)}


def flag_problems(page: str, text: str, commands: Dict[str, Set[str]]) -> List[str]:
    """`simcluster CMD [SUB] ... --flag` in code spans and in code-block lines, and `CMD
    --flag` in code spans: each --flag must be an option of that command. Stops at a pipe,
    a ';', '&&' or '--' (what follows is another program's)."""
    tops = {p.split()[1] for p in commands if len(p.split()) > 1}
    candidates = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            for m in re.finditer(r"(?:^|[\s($`'\"])(simcluster\s+[^|;&#`'\")]*)", line):
                candidates.append((n, m.group(1)))
        else:
            for span in code_spans(line):
                m = re.search(r"(?:^|\s)(simcluster\s+.*)$", span)
                if m:
                    candidates.append((n, m.group(1)))
                elif span.split()[:1] and span.split()[0] in tops and len(span.split()) > 1 \
                        and span.split()[1].startswith("--"):
                    candidates.append((n, "simcluster " + span))
    problems = []
    for n, cmdline in candidates:
        words = re.split(r"\s+", re.split(r"\s(?:\||;|&&|--)(?:\s|$)", cmdline)[0].strip())
        path = "simcluster"
        for w in words[1:]:
            if f"{path} {w}" in commands:
                path = f"{path} {w}"
            elif not w.startswith("-"):
                if path == "simcluster":
                    break
        else:
            pass
        if path == "simcluster":
            continue
        for w in words[1:]:
            flag = w.split("=")[0]
            if re.match(r"^--[a-z][\w-]*$", flag) and flag not in commands[path]:
                problems.append(f"{page}:{n}: `{path}` has no option {flag}: fix the example, or add the option")
    return problems


def test_flags_named_in_docs_exist():
    commands = _command_options()
    problems = []
    for page in doc_files():
        problems += flag_problems(rel(page), page.read_text(), commands)
    _fail_if(problems)


def spec_key_problems(page: str, text: str, accepted: Set[str]) -> List[str]:
    """`key: value` code spans whose key is camelCase (as spec keys are, and Ansible's
    snake_case variables and action inputs are not) must name a key the validator accepts."""
    problems = []
    for n, line in prose_lines(text):
        for span in code_spans(line):
            m = re.match(r"^([a-z]+[A-Z][A-Za-z]*):(?:\s|$)", span)
            if m and m.group(1) not in accepted:
                problems.append(f"{page}:{n}: `{span}`: '{m.group(1)}' is no key of the cluster spec "
                                f"(provisioner/config/validate.py): fix the name")
    return problems


def test_spec_keys_named_in_docs_exist():
    from provisioner.config import validate
    accepted = set(validate.TOP_KEYS) | set(validate.NODE_KEYS) | set(validate.PARTITION_KEYS) | \
        set(validate.ACCOUNT_KEYS) | set(validate.QOS_KEYS)
    problems = []
    for page in doc_files():
        problems += spec_key_problems(rel(page), page.read_text(), accepted)
    _fail_if(problems)


def test_named_code_paths_exist():
    problems = []
    for page in doc_files():
        problems += path_problems(page, page.read_text())
    _fail_if(problems)


# ---------------------------------------------------- the checkers fail when they should

def test_slug_follows_github():
    assert github_slug("MPI (check `basic.mpi`)") == "mpi-check-basicmpi"
    assert github_slug("`status --ssh`, `verify --ssh` and `export-logs --ssh`") == \
        "status---ssh-verify---ssh-and-export-logs---ssh"
    assert github_slug("stop / start") == "stop--start"
    assert github_slug("[Link](x.md) and *em*") == "link-and-em"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_link_checker_finds_a_missing_anchor_and_file(tmp_path):
    page = DOCS / "x.md"
    text = "see [a](verify.md#no-such-heading), [b](missing.md), [c](verify.md#timing), `[d](nope.md)`\n"
    problems = link_problems(page, text, lambda p: anchors(p.read_text()))
    assert len(problems) == 2
    assert "has no heading with anchor '#no-such-heading'" in problems[0]
    assert "missing.md does not exist" in problems[1]


def test_orphan_check_finds_an_unlinked_page():
    a, b = DOCS / "a.md", DOCS / "b.md"
    assert orphan_pages([a, b], {a: {b}, b: set()}) == [
        "docs/a.md is linked from no other page: link it from docs/README.md (the docs index) or from the "
        "page it belongs to"]
    assert orphan_pages([a, b], {a: {b}, b: {a}}) == []


def test_command_checker_finds_an_undocumented_option():
    doc = ("## `simcluster up`\n\n| option | meaning |\n|---|---|\n| `-n`, `--name NAME` | name |\n"
           "| `--gone` | removed |\n\n## `simcluster image`\n\n### `simcluster image build`\n\n"
           "| option | meaning |\n|---|---|\n| `--train` | x |\n")
    problems = command_doc_problems(doc, [("simcluster up", ["--name", "-n", "--brand-new"]),
                                          ("simcluster image", []),
                                          ("simcluster image build", ["--train", "--no-cache"]),
                                          ("simcluster down", ["--all"])])
    assert problems == [
        "docs/commands.md: option --brand-new of `simcluster up` is not documented: add it to the options table "
        "under the heading '`simcluster up`'",
        "docs/commands.md: `simcluster up` lists option --gone, which the command does not have: remove it or add "
        "the option",
        "docs/commands.md: option --no-cache of `simcluster image build` is not documented: add it to the options "
        "table under the heading '`simcluster image build`'",
        "docs/commands.md: no section for `simcluster down`: add a heading '## `simcluster down`' with what it "
        "does and a table of its options (--all)"]


def test_command_checker_sees_a_flag_added_to_a_real_command():
    """A flag added to `simcluster up` without docs fails the check against the real page."""
    from provisioner.cli.main import cli
    up = cli.commands["up"]
    extra = click.Option(["--undocumented-flag"], is_flag=True)
    up.params.append(extra)
    try:
        problems = command_doc_problems((DOCS / "commands.md").read_text(), cli_commands())
    finally:
        up.params.remove(extra)
    assert problems == ["docs/commands.md: option --undocumented-flag of `simcluster up` is not documented: add "
                        "it to the options table under the heading '`simcluster up`'"]


def test_key_checker_finds_undocumented_and_unknown_keys():
    doc = "## Top-level keys\n\n| key | type |\n|---|---|\n| `name` | string |\n| `oldKey` | int |\n"
    assert key_doc_problems(doc, {"Top-level keys": {"name", "newKey"}, "Node keys": {"port"}}) == [
        "docs/config.md: YAML key 'newKey' (accepted by provisioner/config/validate.py) is not documented: add a "
        "row '| `newKey` | type | default | meaning |' under '## Top-level keys'",
        "docs/config.md: '## Top-level keys' documents key 'oldKey', which provisioner/config/validate.py does not "
        "accept: remove the row, or accept the key",
        "docs/config.md: no heading '## Node keys': add it with a table of its keys (port)"]


def test_check_checker_finds_undocumented_and_unknown_checks():
    doc = "| check | job |\n|---|---|\n| basic.nodes | sinfo |\n| `basic.gone` | x |\n"
    assert check_doc_problems(doc, ["basic.nodes", "basic.new-check"], ["basic"]) == [
        "docs/verify.md: verify check 'basic.new-check' (provisioner/verify/suites.py CHECKS) is not documented: "
        "add a row '| basic.new-check | job | passes when |' to the checks table",
        "docs/verify.md: the table documents check 'basic.gone', which provisioner/verify/suites.py does not have: "
        "remove or rename the row"]


def test_make_checker_finds_an_undocumented_target():
    documented, every = make_targets("a: b  ## does a\nb:\n\tx\nVAR := 1\n$(X)/.y: z\nc d: ## both\n")
    assert documented == {"a", "c", "d"} and every == {"a", "b", "c", "d"}
    assert make_doc_problems("| `make a` | x |\n| `make c` |", documented) == [
        "docs/make.md: Make target 'd' (it has a '##' comment in the Makefile) is not documented: add a row "
        "'| `make d` | what it does |'"]
    assert unknown_make_targets("p.md", "run `make demo` or `make nope`\n", {"demo"}) == [
        "p.md:1: `make nope` is not a target of the Makefile"]


def test_env_checker_finds_an_undocumented_variable():
    read = env_variables_read([("a.py", 'os.environ.get("SIMCLUSTER_NEW", "x"); os.environ["PATH"]'),
                               ("b.py", "os.getenv('XDG_CONFIG_HOME')")])
    assert read == {"SIMCLUSTER_NEW": "a.py", "XDG_CONFIG_HOME": "b.py"}
    assert env_doc_problems("| `XDG_CONFIG_HOME` | x |", read) == [
        "docs/environment.md: environment variable SIMCLUSTER_NEW (read in a.py) is not documented: add a row "
        "'| `SIMCLUSTER_NEW` | used for | default |'"]


def test_reference_checker_finds_a_missing_page_and_anchor():
    refs = doc_references("x.py", 'hint = "see docs/verify.md#timing"\n# docs/nope.md, docs/verify.md#nope')
    assert refs == [("x.py:1", "verify.md", "timing"), ("x.py:2", "nope.md", ""), ("x.py:2", "verify.md", "nope")]
    assert reference_problems(refs, lambda p: anchors(p.read_text())) == [
        "x.py:2: names docs/nope.md, which does not exist",
        "x.py:2: names docs/verify.md#nope, but docs/verify.md has no heading with that anchor (fix the anchor, "
        "or the heading)"]


def test_jargon_checker():
    why = ("means nothing to a user: say what is meant (the example scripts, the bug itself, the platform), or "
           "move the history to docs/dev/")
    assert jargon_problems("p.md", "ok\nas in the seeds' script (pitfall 1, issue 10)") == [
        f"p.md:2: 'the seeds' {why}", f"p.md:2: 'pitfall 1' {why}", f"p.md:2: 'issue 10' {why}"]
    found = [p.split("'")[1] for p in jargon_problems("p.md", "\n".join([
        "the book chapter's example cluster",
        "not exercised by our CI; measured on the 2-core dev machine",
        "on this 2-core machine, before (main at 244713a), old = fe56e21",
        "alternating with the commit before (c16032e, the same image)",
        "the seed's tree and The seed's sbatch line",
        "our crun runtime runs root's jobs only; an Epilog of yours replaces Ours",
    ]))]
    assert found == ["book chapter", "our CI", "the 2-core", "dev machine", "this 2-core", "main at 244713a",
                     "old = fe56e21", "c16032e", "the seed", "The seed", "our", "Ours"]
    # Names and ordinary words are not shorthand.
    assert jargon_problems("p.md", "--seed 11, configs/examples/node6-node7-one-gpu-each.yaml, manual_seed, "
                                   "tests/data/check/seeds/, a seed with numpy, 1149781, deadbeef, "
                                   "GPU-1a2b3c4d-0000, a 2-core host, 00000000:18:00.0, hours, yours, tour, "
                                   "four, flavour") == []


def test_contents_checker():
    page = ("# T\n\n- [A](#a)\n- [B things](#b)\n- [Z](#z)\n\n## A\n\n## B\n\n## C\n\n### sub\n")
    assert contents_problems("p.md", page) == [
        "p.md:4: the contents list says 'B things' for the heading 'B': use the heading's words",
        "p.md:5: the contents list links to '#z', which is no heading of the page",
        "p.md: the contents list (line 3) misses the section 'C': add '- [C](#c)'"]
    assert contents_problems("p.md", "- [B](#b)\n- [A](#a)\n- [C](#c)\n## A\n## B\n## C\n") == [
        "p.md: the contents list (line 1) is not in the order of the page's sections"]
    assert contents_problems("p.md", "- [A](#a)\n- [B](#b)\n- [C](#c)\n## A\n## B\n## C\n") == []


def test_contents_checker_sees_the_real_troubleshooting_page():
    """A section added to troubleshooting.md without its contents line fails."""
    text = (DOCS / "troubleshooting.md").read_text() + "\n## A brand-new problem\n\ntext\n"
    assert contents_problems("docs/troubleshooting.md", text) == [
        "docs/troubleshooting.md: the contents list (line 11) misses the section 'A brand-new problem': add "
        "'- [A brand-new problem](#a-brand-new-problem)'"]


def test_flag_checker():
    commands = {"simcluster": {"-v"}, "simcluster up": {"--nodes", "--sudo", "-v"},
                "simcluster image": {"-v"}, "simcluster image build": {"--train", "-v"},
                "simcluster exec": {"-v"}}
    text = ("run `simcluster up --nodes 2 --gone`, `up --sudo`, `up --nope`, `image build --train`\n"
            "```\n$ simcluster image build --trian\nsimcluster exec -- sbatch --wait x.sh\n"
            "simcluster up --nodes 2 | grep --color x\n```\n`sbatch --wait` and `make demo`\n")
    assert flag_problems("p.md", text, commands) == [
        "p.md:1: `simcluster up` has no option --gone: fix the example, or add the option",
        "p.md:1: `simcluster up` has no option --nope: fix the example, or add the option",
        "p.md:3: `simcluster image build` has no option --trian: fix the example, or add the option"]


def test_spec_key_checker():
    text = "`fakeGpus: 2`, `failureDetection: fast`, `fakeGPUs: 2`, `sudo: auto`, `slurm_gpus: 0-7`\n"
    assert spec_key_problems("p.md", text, {"fakeGpus", "failureDetection"}) == [
        "p.md:1: `fakeGPUs: 2`: 'fakeGPUs' is no key of the cluster spec (provisioner/config/validate.py): fix "
        "the name"]


@pytest.mark.parametrize("token, problem", [
    ("provisioner/cluster/lifecycle/create.py", None),
    ("provisioner/cluster/lifecycle/create.py:STOP_ORDER", None),
    ("provisioner/render.py:build_context", None),
    ("configs/templates/*.j2", None),
    ("ansible/", None),
    ("$SIMCLUSTER_HOME/<name>", None),
    ("provisioner.verify.accounting.check_accounting", None),
    ("provisioner/actions/context.py", "provisioner/actions/context.py does not exist"),
    ("provisioner/cluster/services/daemons.py:SLURMD_ENV_DEFAULTS",
     "provisioner/cluster/services/daemons.py has no 'SLURMD_ENV_DEFAULTS'"),
    ("provisioner.accounting_check.check_accounting", "no module provisioner.accounting_check"),
    ("provisioner/data/configs/templates/slurm.conf.j2", None),
    ("provisioner.verify.accounting.nothing", "provisioner/verify/accounting.py defines no 'nothing'"),
    ("configs/templates/*.nothing", "nothing matches configs/templates/*.nothing"),
])
def test_path_checker(token, problem):
    assert path_problem(token) == problem
