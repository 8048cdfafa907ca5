"""A file in a message (``@path``, chats/attachments.py): worked examples, refusals in one line with nothing sent,
the n-gram drafter copying from an attached file, and completion in the REPL's and the app's prompts."""

from __future__ import annotations

import pytest

from backend_kinds import ask, controller_for, write_profile
from specchat.app.chat_app import make_app
from specchat.app.chat.prompt import PromptInput
from specchat.chats.attachments import MAX_BYTES, candidates, expand
from specchat.errors import Refused
from specchat.repl.shell import ReplSettings
from helpers import CTRL_D, ready, run_repl, SIZE, wait_until

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")
NOTES = "Été à Córdoba: 猫 🙂\nline two\n"


@pytest.fixture
def files(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text(NOTES)
    (tmp_path / "my notes.md").write_text("quoted ``` fence inside\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("def f():\n    return 1\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "big.txt").write_text("x" * (MAX_BYTES + 1))
    (tmp_path / "latin1.txt").write_bytes("Córdoba".encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_attachments_on_worked_examples(files):
    assert expand("Fix @src/app.py, please. Thanks @alice", files) == (
        "Fix `src/app.py`, please. Thanks @alice\n\nFile `src/app.py`:\n```python\ndef f():\n    return 1\n```")
    assert expand('Read @"my notes.md" and @notes.txt and @notes.txt', files) == (
        "Read `my notes.md` and `notes.txt` and `notes.txt`\n\n"
        "File `my notes.md`:\n````markdown\nquoted ``` fence inside\n````\n\n"  # a longer fence than the text's
        f"File `notes.txt`:\n```\n{NOTES.rstrip()}\n```")  # mentioned twice, attached once
    assert expand("mail a@b.com", files) == "mail a@b.com"  # not a mention: no space before the @
    assert expand("see @notes.txt. And (@src/app.py)", files).startswith("see `notes.txt`. And (`src/app.py`)\n\n")
    # Code is left as it is: decorators, a mention quoted in code, and an attached file's own text when the message
    # is edited and sent again.
    code = "```python\n@app.route('/')\n@nope.txt\n```\nuse @pytest.mark.parametrize and `@x.py`"
    assert expand(code, files) == code
    once = expand("Fix @src/app.py", files)
    assert expand(once, files) == once
    # Everyday @ words that name no file are text, sent as written; an explicit path to a file is attached.
    for everyday in ("What does @app.route do?", "install @types/node", "ping @john.doe", "use @v1.2",
                     "see @missing.txt", "@" + "x" * 300 + ".txt"):
        assert expand(everyday, files) == everyday
    assert expand("Fix @./src/app.py", files).startswith("Fix `./src/app.py`\n\nFile `./src/app.py`:\n```python")
    assert candidates("no", files) == ["notes.txt"] and candidates("s", files) == ["src/"]
    assert candidates("src/", files) == ["src/app.py"] and candidates("zzz", files) == []


@pytest.mark.parametrize("text, message", [
    ("see @image.png", "@image.png is not UTF-8 text (a binary file, or another encoding)"),
    ("see @latin1.txt", "@latin1.txt is not UTF-8 text"),
    ("see @~nosuchuser-xyz/notes.txt", "@~nosuchuser-xyz/notes.txt: cannot be read as a path"),
    ("see @./" + "x" * 300 + ".txt", "cannot be read as a path"),
    ("see @big.txt", f"@big.txt is {MAX_BYTES + 1:,} bytes, more than the {MAX_BYTES:,} a message may attach"),
    ("see @./missing.txt", "@./missing.txt: no such file (in "),
    ("see @/nonexistent/missing.txt", "@/nonexistent/missing.txt: no such file"),
    ('see @"missing notes.txt"', "@missing notes.txt: no such file"),
    ("see @src", "@src is a folder"),
])
def test_a_file_that_cannot_be_attached_is_refused_in_one_line(files, text, message):
    with pytest.raises(Refused) as refused:
        expand(text, files)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_ngram_drafter_copies_from_an_attached_file(files, tmp_path, user_cache, llama_server, servers):
    (files / "poem.txt").write_text("The quick brown fox jumps over the lazy dog near the quiet river bank at dawn.\n")
    profile = write_profile(tmp_path, "in-process", binary=llama_server, servers=servers)
    profile.write_text(profile.read_text().replace('method = "draft"', 'method = "ngram"'))
    controller = controller_for(profile, max_tokens=40)
    try:
        with pytest.raises(Refused, match="@./nope.txt: no such file"):
            controller.begin("Repeat exactly the text of @./nope.txt")
        assert controller.session.turns == []  # nothing was sent
        record = ask(controller, "Repeat exactly the text of @poem.txt")
        assert "File `poem.txt`:\n```\nThe quick brown fox" in controller.session.turns[0].text
        assert record.stats["accepted"] >= 5 and "quick brown fox" in record.text  # drafts copied from the file
    finally:
        controller.close()


def test_attaching_and_completing_in_the_repl(files, user_cache):
    settings = ReplSettings("tiny", db_path=files / "chats.sqlite3", history_path=files / "history", max_tokens=8,
                            color=False)
    repl, _, text = run_repl(settings, "Summarise @image.png\r", "\x15Summarise @no", "\t", "\r", CTRL_D)
    assert "specchat: @image.png is not UTF-8 text" in text
    (user, _reply) = repl.session.turns
    assert user.text.startswith("Summarise `notes.txt`\n\nFile `notes.txt`:")  # Tab completed the name


async def test_attaching_and_completing_in_the_app(files, settings):
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        prompt = app.query_one(PromptInput)
        prompt.load_text("Summarise @image.png")
        prompt.move_cursor(prompt.document.end)
        await pilot.press("enter")
        assert app.session.turns == [] and prompt.text == "Summarise @image.png"  # refused, kept to change
        prompt.load_text("Summarise @no")
        prompt.move_cursor(prompt.document.end)
        await pilot.press("tab")
        assert prompt.text == "Summarise @notes.txt"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and app.session.last_reply is not None
                         and app.session.last_reply.finish_reason)
        assert app.session.turns[0].text.endswith(f"```\n{NOTES.rstrip()}\n```")
