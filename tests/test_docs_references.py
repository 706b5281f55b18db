"""Every document that src/, tests/ and bench/ cite is in the repository
(docs/style.md "Shape and comments"): a reference to a `*.md` file names a
file that exists, and a `docs/<name>.md "Section"` citation names a heading
of that document, or the bold lead of one of its paragraphs (the cited words
appear in it, case and backticks ignored)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIRS = ("src", "tests", "bench")
SELF = Path(__file__).resolve()
# Documents cited before they are written (none now: docs/performance.md
# landed with bench/compare.py and is checked as the others are).
PENDING: set[str] = set()

# A file name ending in .md, with the folders before it; not one that is
# only the tail of a longer path or of a URL.
MD_REF = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
# The same name as a whole string literal: a file a test writes or reads.
LITERAL = re.compile(r"\"((?:[\w.-]+/)*[\w.-]+\.md)\"")
# `docs/x.md "Section"` (or `docs/x.md, "Section"`); the words may wrap over
# lines of a comment or a docstring.
SECTION_REF = re.compile(r"\b(docs/[\w.-]+\.md),? \"([^\"]{1,80})\"")
ANCHOR = re.compile(r"^(?:#{1,6}\s+(.*)|\*\*(.+?)\*\*)", re.MULTILINE)


def _sources() -> list[Path]:
    return sorted(p for d in DIRS for p in (ROOT / d).rglob("*.py") if p != SELF)


def _flat(text: str) -> str:
    """The text with comment markers and line breaks folded into spaces."""
    return re.sub(r"\s+", " ", re.sub(r"\n[ \t]*#[ \t]*", " ", text))


def _exists(ref: str) -> bool:
    """A path from the repository's root, or a bare name beside the other docs
    (docs/ link to each other as `api.md`)."""
    return (ROOT / ref).is_file() or ("/" not in ref and (ROOT / "docs" / ref).is_file())


def _anchors(doc: str) -> list[str]:
    text = (ROOT / doc).read_text()
    return [(h or b).lower().replace("`", "") for h, b in ANCHOR.findall(text)]


def test_every_md_reference_exists() -> None:
    missing = []
    for path in _sources():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            literals = set(LITERAL.findall(line))
            missing += [
                f"{path.relative_to(ROOT)}:{n}: {ref}"
                for ref in MD_REF.findall(line)
                if ref not in literals and ref not in PENDING and not _exists(ref)
            ]
    assert not missing, f"{len(missing)} references to files not in the repository:\n" + "\n".join(missing)


def test_every_cited_section_exists() -> None:
    missing = []
    for path in _sources():
        for doc, section in SECTION_REF.findall(_flat(path.read_text())):
            if not _exists(doc):
                continue  # the test above names it
            words = section.lower().replace("`", "")
            if not any(words in anchor for anchor in _anchors(doc)):
                missing.append(f'{path.relative_to(ROOT)}: {doc} "{section}"')
    assert not missing, f"{len(missing)} cited sections not found:\n" + "\n".join(missing)


def test_the_documents_cite_only_documents_of_the_repository() -> None:
    """The README and docs/ name no document that is not in the repository
    (a contract or design kept elsewhere): a reader of the repository could
    not follow it. Links between docs are relative to docs/."""
    missing = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            missing += [
                f"{path.relative_to(ROOT)}:{n}: {ref}"
                for ref in MD_REF.findall(line)
                if not _exists(ref) and not (path.parent / ref).is_file()
            ]
    assert not missing, f"{len(missing)} references to documents not in the repository:\n" + "\n".join(missing)


def _distribution(requirement: str) -> str:
    """`"hypercorn>=0.17,<0.19"` -> `hypercorn`; the project's own extras
    (`tempo[report]`) are not a dependency."""
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]


def test_the_readme_names_every_dependency() -> None:
    """A newcomer learns from the README what tempo installs and why
    (pyproject.toml gives each reason): every runtime, optional and test
    dependency is named in it, in backticks or after "The tests add"."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_distribution(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_distribution(r) for r in extra}
    wanted.discard("tempo")
    readme = (ROOT / "README.md").read_text().lower()
    missing = sorted(name for name in wanted if not re.search(rf"(?<![\w-]){re.escape(name.lower())}(?![\w-])", readme))
    assert not missing, f"README.md does not name these dependencies of pyproject.toml: {missing}"
