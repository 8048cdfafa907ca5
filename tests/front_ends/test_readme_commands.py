"""Every ``specchat …`` command the README and docs/ document runs, as a user would type it, and ends without a
traceback.

A documented command that crashed untested (``specchat profiles templates``, a ModuleNotFoundError) is what this
guards against: the lines are read from README.md and docs/*.md themselves, so a new one is run as soon as it is
written. "…" stands
for a prompt, and a prompt is piped in (what `specchat ask` and `specchat repl` answer when named without one); a pipe
into a pager is left out; the chat app (``specchat`` alone) is started in a real terminal by
test_app.py. Lines that name a model this machine does not have say so in one line and exit non-zero: that is their
documented behaviour, and it is checked too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROMPT = "Say hi."
INLINE = re.compile(r"`(specchat [a-z][^`]*)`")
PATTERN = re.compile(r"[\[\]|…]|\b[A-Z]{2,}\b| -[-a-z]+$")
NEEDS_ABSENT_MODELS = ("qwen3-", "gemma4-", "server-none", "server-ngram-simple", "server-draft-mtp")


def documented_commands() -> list[str]:
    """The ``specchat`` commands of the shell blocks of the README and docs/ (fences opened with ```sh, ```bash or ```
    alone), and those their prose names whole in backticks (`specchat profiles templates`; a span with a placeholder — NAME, [...],
    "…" — or ending in an option that needs its value is a pattern, not a command)."""
    commands, fence = [], None
    for line in (line for path in DOCUMENTS for line in path.read_text(encoding="utf-8").splitlines()):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence is None:
            commands += [span for span in INLINE.findall(line) if span not in commands and not PATTERN.search(span)]
            continue
        if fence not in ("sh", "bash", ""):
            continue
        line = line.split("  #")[0].strip()  # a comment after the command
        for part in line.split("&&"):
            part = part.strip()
            if part.startswith("specchat ") or part == "specchat":
                commands.append(part)
    return list(dict.fromkeys(commands))  # a command documented twice runs once


def test_the_readme_documents_commands_and_this_test_reads_them_all():
    commands = documented_commands()
    assert len(commands) >= 12 and "specchat profiles list" in commands
    assert any(c.startswith("specchat server build") for c in commands)
    # Named only in the prose, and the one a note tells users to run: it crashed with a traceback, untested.
    assert {"specchat profiles templates", "specchat server which", "specchat repl"} <= set(commands)


@pytest.fixture(scope="module")
def stored_chat(tmp_path_factory, user_cache_in) -> Path:
    """A user's data folder with one chat in it, chatted once through ``specchat repl`` for the commands that read
    stored chats (each test takes a copy: ``chats private`` changes it)."""
    root = tmp_path_factory.mktemp("chatted")
    user_cache_in(root / "home")
    env = {**os.environ, "HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "config"),
           "XDG_DATA_HOME": str(root / "data")}
    chatted = subprocess.run([sys.executable, "-m", "specchat", "repl", "--max-tokens", "24"], capture_output=True,
                             text=True, env=env, timeout=900, input=PROMPT + "\n¿Qué es el código de decodificación?\n")
    assert chatted.returncode == 0, chatted.stderr
    return root / "data"


@pytest.mark.parametrize("command", [c for c in documented_commands() if c != "specchat"])
def test_a_documented_command_runs(command, tmp_path, user_cache, llama_server, request):
    line = command.split("|")[0].strip().replace("…", PROMPT)
    argv = shlex.split(line)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "SPECCHAT_LLAMA_SERVER": str(llama_server)}  # the server the tests built, as a user's would be found
    if argv[1:3] != ["server", "build"]:  # building reads the real user cache, where the tests' server was built
        env["HOME"] = str(tmp_path / "home")
    if argv[1] in ("ask", "bench"):  # the command runs as written; a long reply or a second round proves no more
        shorter = {"--max-tokens": "24"} | ({"--repeat": "1"} if argv[1] == "bench" else {})
        for option, value in shorter.items():
            if option in argv:
                argv[argv.index(option) + 1] = value
            else:
                argv += [option, value]
    if argv[1] in ("replay", "chats"):  # they read stored chats: one chat first, as a user has (what the search finds)
        shutil.copytree(request.getfixturevalue("stored_chat"), tmp_path / "data")
    result = subprocess.run([sys.executable, "-m", "specchat", *argv[1:]], capture_output=True, text=True, env=env,
                            timeout=900, input=PROMPT + "\n")  # what `ask` or `repl` without a prompt answers
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    if any(name in line for name in NEEDS_ABSENT_MODELS) and result.returncode != 0:
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert len(lines) <= 1, result.stderr  # one clear line, naming what is missing
        return
    assert result.returncode == 0, (line, result.stderr)
    assert result.stdout.strip(), line
