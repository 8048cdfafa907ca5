"""Screenshots of the app's main states from a real run of the bundled model pair: SVG (Textual) and PNG.

The PNGs are drawn cell by cell from the SVG (``terminal_png``), so they look like the terminal.

    pip install -e '.[screenshots]' && python screenshots/make_screenshots.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from terminal_png import svg_to_png

from specchat.app.chat_app import make_app
from specchat.app.settings import Settings
from specchat.app.widgets.prompt import PromptInput

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
            await until(pilot, lambda: app._last_reply is not None and len(app._last_reply.segments) >= 40)
            app.refresh_sidebar()
            save(app, "streaming")
            await until(pilot, lambda: app.busy is None)
            await pilot.pause(0.3)
            await pilot.press("ctrl+g")
            await pilot.pause(0.2)
            save(app, "finished-ghosts")
            await pilot.press("ctrl+g", "f3")
            await pilot.pause(0.2)
            save(app, "finished-markdown")
            await pilot.press("f3", "f2")
            await pilot.pause(0.5)
            save(app, "profile-picker")
            await pilot.press("escape", "f1")
            await pilot.pause(0.2)
            save(app, "help")
            await pilot.press("escape")
            await pilot.resize_terminal(72, 30)
            await pilot.pause(0.3)
            save(app, "narrow")


if __name__ == "__main__":
    asyncio.run(main())
