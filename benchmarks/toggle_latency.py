"""How quick is a quick toggle? The time from the key to the next message being sendable, and whether the target's
cache survived it (the next reply decodes only its own message, not the whole chat again).

In one chat on the embedded pair: speculation off and on by hand on `tiny` (Ctrl+T), then back and forth between
`tiny` and `ngram` (F4: two profiles that share the target), each toggle followed by a short reply. For each: the
median switch time, what it did, and the next reply's prompt tokens decoded against the prompt's length.

    python benchmarks/toggle_latency.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from time import perf_counter

from specchat.chats.choice import Choice
from specchat.chats.controller import ChatController


def reply(controller: ChatController, text: str) -> tuple[int, int]:
    """Ask ``text``; the reply's (prompt tokens decoded, prompt tokens)."""
    exchange = controller.begin(text)
    events: list = []
    assert exchange.run(events.append) is None
    controller.absorb(events)
    stats = controller.session.last_reply.stats
    return stats["prefill_tokens"], stats["prompt_tokens"]


def toggle(controller: ChatController, make: Callable[[], Choice]) -> tuple[float, str]:
    started = perf_counter()
    switched = controller.switcher.switch(make())
    controller.switcher.profile_switched(switched)
    return perf_counter() - started, switched.action


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    controller = ChatController(None, "tiny", lambda *_: None, max_tokens=24)
    controller.switcher.profile_switched(controller.switcher.switch_profile("tiny"))
    rows: dict[str, list[tuple[float, str, int, int]]] = {"speculation off/on on tiny (Ctrl+T)": [],
                                                          "tiny <-> ngram (F4)": []}
    try:
        reply(controller, "Name a colour.")
        for name, make in (("speculation off/on on tiny (Ctrl+T)", controller.switcher.speculation_toggled),
                           ("tiny <-> ngram (F4)", controller.switcher.previous_profile)):
            if make == controller.switcher.previous_profile:  # something to go back to
                controller.switcher.profile_switched(controller.switcher.switch_profile("ngram"))
            for round_ in range(2 * args.rounds):
                seconds, action = toggle(controller, make)
                prefill, prompt = reply(controller, f"Name another colour ({round_ + 1}).")
                rows[name].append((seconds, action, prefill, prompt))
        for name, measured in rows.items():
            times = [m[0] * 1000 for m in measured]
            actions = sorted({m[1] for m in measured})
            decoded = [f"{m[2]}/{m[3]}" for m in measured]
            print(f"{name}: switch median {statistics.median(times):.1f} ms (max {max(times):.1f}), {', '.join(actions)};"
                  f" next reply decoded / prompt tokens: {' '.join(decoded)}")
    finally:
        controller.close()


if __name__ == "__main__":
    main()
