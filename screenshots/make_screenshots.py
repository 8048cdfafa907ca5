"""Screenshots of the app's main states from a real run of the bundled model pair: SVG (Textual) and PNG; and of
``specchat repl`` in a real terminal (a tmux pane, read back with its colours).

The PNGs are drawn cell by cell from the SVG (``terminal_png``), so they look like the terminal.

    pip install -e '.[screenshots]' && python screenshots/make_screenshots.py [everyday]
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text
from terminal_png import svg_to_png

from specchat.app.chat_app import make_app
from specchat.app.settings import Settings
from specchat.app.chat.prompt import PromptInput

HERE = Path(__file__).parent
PROMPT = "Write a Python function that checks whether a word is a palindrome, with a short docstring."


async def until(pilot, condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there in time")
        await pilot.pause(0.02)


def save(app, name: str) -> None:
    svg = HERE / f"{name}.svg"
    app.save_screenshot(str(svg.name), path=str(HERE))
    svg_to_png(svg, HERE / f"{name}.png")
    print("wrote", svg.name, "and", f"{name}.png")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db_path=Path(tmp) / "chats.sqlite3", keymap=Path("~/.config/specchat/keymap.toml"),
                            exports=Path(tmp) / "exports", max_tokens=160)
        app = make_app(settings)
        async with app.run_test(size=(130, 40)) as pilot:
            await until(pilot, lambda: app.backend is not None and app.busy is None)
            save(app, "empty")
            app.query_one(PromptInput).load_text(PROMPT)
            await pilot.press("enter")
            await until(pilot, lambda: app.chat_view.chat_log.last_reply is not None and len(app.chat_view.chat_log.last_reply.segments) >= 40)
            app.chat_view.sidebar.redraw()
            save(app, "streaming")
            await until(pilot, lambda: app.busy is None)
            await pilot.pause(0.3)
            await pilot.press("ctrl+g")
            await pilot.pause(0.2)
            save(app, "finished-ghosts")
            await pilot.press("ctrl+g", "f3")
            await pilot.pause(0.2)
            save(app, "finished-markdown")
            await pilot.press("f3", "f8")  # the inspector, moved with the arrows to the reply's last correction
            await pilot.pause(0.2)
            kinds = [kind for _, kind in app.chat_view.chat_log.last_reply.segments]
            correction = max(i for i, kind in enumerate(kinds) if kind == "corrected")
            await pilot.press(*["left"] * (len(kinds) - 1 - correction))
            await pilot.pause(0.2)
            save(app, "inspector")
            await pilot.press("f9", *["right"] * 6)  # the replay of that reply, at its sixth step
            await pilot.pause(0.3)
            save(app, "replay")
            await pilot.press("escape", "escape", "ctrl+t")  # speculation off by hand: the same target, nothing reloads
            await until(pilot, lambda: app.busy is None and "switched off by hand" in app.chat_view.sidebar.plain)
            await pilot.pause(0.3)
            save(app, "toggled-off")
            await pilot.press("ctrl+t")
            await until(pilot, lambda: app.busy is None and "switched off by hand" not in app.chat_view.sidebar.plain)
            await pilot.press("f2")
            await pilot.pause(0.5)
            save(app, "profile-picker")
            await pilot.press("escape", "f1")
            await pilot.pause(0.2)
            save(app, "help")
            await pilot.press("escape")
            await pilot.resize_terminal(72, 30)
            await pilot.pause(0.3)
            save(app, "narrow")


def repl() -> None:
    """Two turns and a slash command in ``specchat repl``, captured from tmux with their escapes."""
    session, size = f"specchat-shot-{os.getpid()}", (120, 26)
    with tempfile.TemporaryDirectory() as tmp:
        command = f"env XDG_DATA_HOME={tmp} {shlex.quote(sys.executable)} -m specchat repl --max-tokens 60; sleep 600"
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), command],
                       check=True)

        def screen(*flags: str) -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", *flags, "-t", session], capture_output=True,
                                  text=True, check=True).stdout

        def wait_for(text: str, count: int = 1) -> None:
            deadline = time.monotonic() + 120
            while screen().count(text) < count:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the REPL did not show {text!r}:\n{screen()}")
                time.sleep(0.2)

        def capture(name: str) -> None:
            console = Console(width=size[0], record=True, file=open(os.devnull, "w"), color_system="truecolor")
            console.print(Text.from_ansi(screen("-e")), end="", soft_wrap=True)
            svg = HERE / f"{name}.svg"
            svg.write_text(console.export_svg(title="specchat repl"))
            svg_to_png(svg, HERE / f"{name}.png")
            print(f"wrote {name}.svg and {name}.png")

        def type_line(text: str) -> None:
            subprocess.run(["tmux", "send-keys", "-t", session, "-l", text], check=True)
            subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True)

        try:
            wait_for("/help for commands")
            type_line("List three uses of a paperclip.")
            wait_for(" · TTFT")
            type_line("/profile ngram")
            wait_for("profile ngram:")
            type_line("Name two planets and describe each in one sentence.")
            wait_for(" · TTFT", 2)  # a summary line (a reply too short for a rate has none: "–" is not printed)
            subprocess.run(["tmux", "send-keys", "-t", session, "-l", "/pro"], check=True)
            time.sleep(1)  # the completion menu
            capture("repl")
            subprocess.run(["tmux", "send-keys", "-t", session, "C-u"], check=True)
            subprocess.run(["tmux", "send-keys", "-t", session, "C-l"], check=True)  # a clear screen for the next one
            type_line("/replay 2")
            wait_for("  so far:")
            type_line("/inspect")
            wait_for("/inspect N explains")
            type_line("/inspect 3")
            wait_for("target's top")
            time.sleep(0.5)
            capture("repl-inspect")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


async def everyday() -> None:
    """Edit a question and send it again (its versions), then search every chat from the chat list."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db_path=Path(tmp) / "chats.sqlite3", keymap=Path("~/.config/specchat/keymap.toml"),
                            exports=Path(tmp) / "exports", max_tokens=60)
        app = make_app(settings)
        async with app.run_test(size=(130, 40)) as pilot:
            await until(pilot, lambda: app.backend is not None and app.busy is None)
            for question in ("Write a haiku about tea.", "And one about coffee?"):
                app.query_one(PromptInput).load_text(question)
                await pilot.press("enter")
                await until(pilot, lambda: app.busy is None and app.session.last_reply is not None
                            and app.session.last_reply.finish_reason is not None)
            await pilot.press("alt+up", "alt+up", "alt+up", "alt+up", "alt+e")
            app.query_one(PromptInput).load_text("Write a haiku about the sea.")
            await pilot.press("enter")
            await until(pilot, lambda: app.busy is None and app.session.last_reply.finish_reason is not None)
            await pilot.press("alt+up", "alt+up")
            await pilot.pause(0.3)
            save(app, "versions")
            await pilot.press("escape", "ctrl+l")
            await pilot.pause(0.2)
            app.screen.query_one("#chat-search").value = "haiku"
            await pilot.pause(0.3)
            save(app, "search")


if __name__ == "__main__":
    if sys.argv[1:] == ["everyday"]:  # only the screenshots of editing, versions and search
        asyncio.run(everyday())
    else:
        asyncio.run(main())
        repl()
        asyncio.run(everyday())
