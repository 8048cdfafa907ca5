"""How many engine events per second the app absorbs: a real reply's events (the bundled pair's, decoded here first),
many times over, into the real app as fast as the UI accepts them, in the frames ``Replies`` hands up.

    python benchmarks/ui_throughput.py [--events 6000] [--batch 75]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

from specchat.app.chat.column import ChatColumn
from specchat.app.chat_app import make_app
from specchat.app.settings import Settings
from specchat.chats.replies import Frame
from specchat.engine import Engine
from specchat.engine.events import DraftRejected, Event, StepVerified, TokenEmitted
from specchat.profiles import load_profile, run_config

PROMPT = "Write a Python function that returns the square of a number."


def one_reply() -> list[Event]:
    """A reply of the bundled pair, its events as the engine yields them."""
    engine = Engine(run_config(load_profile("tiny")))
    try:
        return list(engine.reply(PROMPT, max_tokens=80))
    finally:
        engine.close()


async def measure(n_events: int, batch: int) -> float:
    recorded = one_reply()
    body = [e for e in recorded if isinstance(e, (TokenEmitted, DraftRejected, StepVerified))]
    events = [recorded[0]]
    while len(events) < n_events:
        events += [dataclasses.replace(e) for e in body]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db_path=None, keymap=Path(tmp) / "k.toml", autoload=False, resume=False)
        app = make_app(settings)
        async with app.run_test(size=(130, 40)) as pilot:
            column = app.chat_view.column
            app.chat_view.chat_log.mount_turn(app.session.add_reply(""))
            await pilot.pause()
            view = app.chat_view.chat_log.last_reply
            start = time.perf_counter()
            for i in range(0, len(events), batch):
                part = events[i : i + batch]  # one frame, as Replies.frame hands it up: absorbed, then posted
                column.post_message(ChatColumn.FrameArrived(Frame(part, app.controller.absorb(part), None, False)))
                await pilot.pause()  # let the UI process and render this batch before the next arrives
            elapsed = time.perf_counter() - start
            assert len(view.segments) == sum(isinstance(e, TokenEmitted) for e in events)
    return len(events) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=75)
    args = parser.parse_args()
    rate = asyncio.run(measure(args.events, args.batch))
    print(f"{args.events} events in batches of {args.batch}: the app absorbed {rate:,.0f} events/s")


if __name__ == "__main__":
    main()
