"""A file in a message: ``@path`` (or ``@"a path with spaces"``) puts the file's text into the message as a fenced
block named by its path, so the model — and the n-gram drafter — can copy from it.

Only UTF-8 text files are attached, each at most ``MAX_BYTES`` (the context decides the rest: a message larger than
it is refused in one line): a larger one, a binary one, a folder, or an explicit path that names no file is refused in
one line, and nothing is sent (the message stays in the prompt to be changed). Explicit is quoted or starting where a
path starts (``@./x``, ``@../x``, ``@/x``, ``@~/x``); any other word that names no file is everyday text (``@app.route``,
``@types/node``, ``@john.doe``, ``@v1.2``) and is left as it is, and so is any ``@`` inside code (a fenced block, an
inline `span`) — an attached file's text among it, when the message is edited and sent again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import Refused

MAX_BYTES = 64 * 1024
MENTION = re.compile(r'(?<![^\s(\[])@(?:"([^"]+)"|(\S+))')
CODE = re.compile(r"(`{3,}).*?(?:\1|\Z)|`[^`\n]*`", re.DOTALL)  # fenced blocks (to their end) and inline spans
EXPLICIT = ("./", "../", "/", "~")  # where a path starts: such a word is meant as a file
TRAILING = ".,;:!?)]"  # the end of a sentence or a bracket after a name: "see @notes.txt."
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go", ".c": "c",
             ".h": "c", ".cpp": "cpp", ".java": "java", ".rb": "ruby", ".sh": "sh", ".toml": "toml", ".json": "json",
             ".yaml": "yaml", ".yml": "yaml", ".md": "markdown", ".html": "html", ".css": "css", ".sql": "sql"}


def expand(text: str, base: Path) -> str:
    """``text`` with each attached file's text after it, in the order mentioned (a file mentioned twice, once)."""
    blocks: list[str] = []
    seen: set[Path] = set()

    def replace(match: re.Match) -> str:
        quoted, bare = match.groups()
        name = quoted or bare.rstrip(TRAILING)
        if not name:
            return match.group(0)
        try:
            path = (base / Path(name).expanduser()).resolve()
            is_dir, is_file = path.is_dir(), path.is_file()
        except (OSError, RuntimeError) as exc:  # an unknown ~user, a symlink loop, a name too long
            if not quoted and not name.startswith(EXPLICIT):
                return match.group(0)
            raise Refused(f"@{name}: cannot be read as a path ({exc}) — give a path to a text file") from None
        if is_dir:
            raise Refused(f"@{name} is a folder — attach the files in it one by one (@{name.rstrip('/')}/…)")
        if not is_file:
            if quoted or name.startswith(EXPLICIT):
                raise Refused(f"@{name}: no such file (in {base.resolve()}) — give a path to a text file, or drop"
                              " the @")
            return match.group(0)  # "@alice", "@app.route": everyday text, not a file
        if path not in seen:
            seen.add(path)
            blocks.append(_block(name, path))
        return f"`{name}`" + ("" if quoted else bare[len(name):])

    parts, last = [], 0
    for code in CODE.finditer(text):  # mentions are looked for outside code only
        parts += [MENTION.sub(replace, text[last:code.start()]), code.group(0)]
        last = code.end()
    body = "".join(parts) + MENTION.sub(replace, text[last:])
    return body if not blocks else body.rstrip() + "\n\n" + "\n\n".join(blocks)


def _block(name: str, path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise Refused(f"@{name} is {size:,} bytes, more than the {MAX_BYTES:,} a message may attach — attach a part of"
                      " it (a smaller file)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise Refused(f"@{name}: cannot read it ({exc.strerror or exc})") from None
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        content = ""
    if "\x00" in content or (data and not content):
        raise Refused(f"@{name} is not UTF-8 text (a binary file, or another encoding) — only UTF-8 text files can be"
                      " attached")
    fence = "```"
    while fence in content:
        fence += "`"
    language = LANGUAGES.get(path.suffix.lower(), "")
    return f"File `{name}`:\n{fence}{language}\n{content.rstrip(chr(10))}\n{fence}"


def mention_before(text: str) -> str | None:
    """The ``@word`` being typed at the end of ``text`` (the text before the cursor), without its "@"; None when the
    last word is no mention."""
    word = text.rsplit(None, 1)[-1] if text and not text[-1].isspace() else ""
    return word[1:] if word.startswith("@") else None


def candidates(word: str, base: Path, limit: int = 50) -> list[str]:
    """Completions of ``@word``: the files and folders (with a "/") under ``base`` whose path starts with it."""
    folder, _, stem = word.rpartition("/")
    where = (base / Path(folder).expanduser()) if folder else base
    try:
        entries = sorted(os.scandir(where), key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.name.startswith(stem) and (stem.startswith(".") or not entry.name.startswith(".")):
            found.append(f"{folder + '/' if folder else ''}{entry.name}{'/' if entry.is_dir() else ''}")
            if len(found) >= limit:
                break
    return found
