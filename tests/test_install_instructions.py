"""Every install instruction the project ships points at this repository.

The project is not published on the public package index, where
``agent-action-guard`` is another author's unrelated project: a user told to
``pip install`` one of our names from the index installs a stranger's code.
So an instruction (README, docs, examples, pyproject comments, the messages
of our programs, the Makefile) installs a path, a clone (``'.[mcp]'``), a git
URL, or a third-party package that our own dependency lists name; never a
bare name of ours, old or new, and never a name we do not depend on."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOT_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SDK_PROJECT = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]

# Our distributions, and the name that belongs to someone else on the index.
OUR_NAMES = (ROOT_PROJECT["name"], SDK_PROJECT["name"], "agent-action-guard")
NOT_OURS_ON_THE_INDEX = "agent-action-guard"

# What a reader installs: not the tests, and not the benchmarks (tools for
# developers, which may name a driver they measure ours against).
SKIP_DIRS = {".git", ".venv", "guard-data", "build", "dist", "__pycache__", "node_modules"}
SKIP_TOP = {"tests", "bench"}
SUFFIXES = {".md", ".py", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".html", ".js", ".sh"}

INSTALLER = re.compile(r"\b(?:pip3?|pipx)\s+install\b|\buv\s+add\b|\bpoetry\s+add\b")
# These end an instruction outside single quotes (a line break ends it
# anywhere): the end of its code span, string or shell command, or a comment.
STOPS = {"\n", "`", '"', ";", "&", "|", ")"}
# pip options whose value is a file or an index, not something to install.
TAKES_VALUE = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return _normal(match.group(0))


def _dependencies() -> set[str]:
    """Every third-party name our dependency lists hold, extras included, and
    pip itself (the Makefile upgrades it in the project's own environment)."""
    requirements = [*ROOT_PROJECT["dependencies"], *SDK_PROJECT["dependencies"]]
    for extra in ROOT_PROJECT.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    names = {_requirement_name(r) for r in requirements} | {"pip"}
    return {n for n in names if not _ours(n)}


def _ours(name: str) -> bool:
    squashed = _normal(name).replace("-", "")
    return any(_normal(ours).replace("-", "") in squashed for ours in OUR_NAMES)


ALLOWED = _dependencies()


def _arguments(text: str, start: int) -> list[str]:
    """The words of the instruction that starts at ``start`` (just after
    ``pip install``): to the first stop outside single quotes. An
    instruction cut by a line break right after ``install`` (a wrapped code
    span) goes on with the next line."""
    rest = text[start:]
    first, newline, after = rest.partition("\n")
    if not first.strip() and newline:
        rest = re.sub(r"^[\s#/*>]*", "", after)
    rest = re.sub(r"<[^<>\n]*>", "<placeholder>", rest)  # "<path to the clone>" is one word
    words: list[str] = []
    word = ""
    quoted = False
    for char in rest:
        if char == "\n":
            break
        if char == "'":
            quoted = not quoted
            word += char
        elif quoted:
            word += char
        elif char in STOPS or (char == "#" and not word):
            break
        elif char.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    if word:
        words.append(word)
    # a sentence goes on after "...[mcp]'." or "<path>/sdk,"
    for index, word in enumerate(words):
        if word.endswith((".", ",", ":")) and len(word) > 1:
            return [*words[:index], word[:-1]]
    return words


def problems_in(text: str) -> list[str]:
    """Each install argument in ``text`` that would fetch a name from the
    index that the project does not own or depend on."""
    problems = []
    for match in INSTALLER.finditer(text):
        words = _arguments(text, match.end())
        skip = False
        for word in words:
            if skip:
                skip = False
                continue
            if word.startswith("-"):
                skip = word in TAKES_VALUE
                continue
            target = word.strip("'")
            if not target or target[0] in "./~$" or re.search(r"[/<]|^git\+", target):
                continue  # a path, a clone, a placeholder or a URL
            name = _requirement_name(target)
            if _ours(name):
                problems.append(f"{word}: our name, fetched from the index ({match.group(0)})")
            elif name not in ALLOWED:
                problems.append(f"{word}: not one of our dependencies ({match.group(0)})")
    return problems


def _shipped_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in SKIP_TOP or any(
            part in SKIP_DIRS or part.endswith((".egg-info", "_cache")) for part in relative.parts
        ):
            continue
        if path.is_file() and (
            path.suffix in SUFFIXES or path.name == "Makefile" or relative.parts[0] == "examples"
        ):
            found.append(path)
    return sorted(found)


def test_no_shipped_text_tells_users_to_install_a_name_from_the_index_we_do_not_own() -> None:
    files = _shipped_files()
    assert ROOT / "README.md" in files
    assert ROOT / "pyproject.toml" in files
    assert ROOT / "Makefile" in files
    assert any(p.parent.name == "docs" for p in files)
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for problem in problems_in(text):
            problems.append(f"{path.relative_to(ROOT)}: {problem}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("pip install 'agent-action-guard[mcp]'", id="old-name"),
        pytest.param("`pip install\n  'agent-action-guard[postgres]'` (make)", id="wrapped"),
        pytest.param(f"pip install {ROOT_PROJECT['name']}", id="our-name"),
        pytest.param(f"# pip install '{SDK_PROJECT['name']}>=0.1'", id="our-client"),
        pytest.param("python -m pip install -q Agent_Action.Guard", id="spelled-otherwise"),
        pytest.param("uv add agent-action-guard-server", id="containing-ours"),
        pytest.param("pip install requests", id="not-a-dependency"),
        pytest.param("`pip install -e . colorama`", id="after-a-path"),
    ],
)
def test_the_check_refuses_names_from_the_index(text: str) -> None:
    assert problems_in(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("pip install '.[mcp]'   # the mcp extra", id="clone-extra"),
        pytest.param("`pip install <path to this repository>/sdk`", id="placeholder-path"),
        pytest.param("pip install 'git+<URL of this repository>#subdirectory=sdk'", id="git-url"),
        pytest.param("$(BIN)/pip install -q -e '.[dev]'", id="makefile"),
        pytest.param("$(BIN)/pip install -q --upgrade pip", id="pip-itself"),
        pytest.param("needs it: pip install playwright.\nThen", id="a-dependency"),
        pytest.param("\"the driver: pip install '.[postgres]'\" more", id="message"),
        pytest.param("pip install -r requirements.txt", id="requirements-file"),
    ],
)
def test_the_check_lets_paths_urls_and_our_dependencies_through(text: str) -> None:
    assert problems_in(text) == []


def test_the_distributions_are_ours_and_the_dev_extra_installs_this_project() -> None:
    names = {_normal(ROOT_PROJECT["name"]), _normal(SDK_PROJECT["name"])}
    assert NOT_OURS_ON_THE_INDEX not in names
    assert not any(NOT_OURS_ON_THE_INDEX in name for name in names)
    # A self-reference under another name would fetch that name from the index.
    (self_reference,) = [
        r for r in ROOT_PROJECT["optional-dependencies"]["dev"] if _ours(_requirement_name(r))
    ]
    assert _requirement_name(self_reference) == _normal(ROOT_PROJECT["name"])


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    assert heading in text, f"{path.name} has no {heading!r}"
    return text.split(heading, 1)[1].split("\n#", 1)[0]


@pytest.mark.parametrize(
    ("doc", "heading"),
    [
        pytest.param("README.md", "### Installing the SDK alone", id="readme"),
        pytest.param("docs/sdk.md", "## Installing the client alone", id="sdk-doc"),
    ],
)
def test_the_client_alone_is_said_to_install_exactly_what_sdk_pyproject_requires(
    doc: str, heading: str
) -> None:
    words = {
        _normal(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", _section(ROOT / doc, heading))
    }
    client = {_requirement_name(r) for r in SDK_PROJECT["dependencies"]}
    server_only = {_requirement_name(r) for r in ROOT_PROJECT["dependencies"]} - client
    assert client - words == set(), "missing from the list"
    assert server_only & words == set(), "the server's, not the client's"
