"""Engine events as JSON, so snapshot tests can replay a real reply deterministically.

Regenerate the fixture from a real run of the bundled pair with: python tests/recorded.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from specchat.engine import events as ev
from specchat.engine.stats import ReplyStats

FIXTURE = Path(__file__).with_name("fixtures") / "recorded_reply.json"
PROMPT = "Write a Python function that returns the square of a number."
TYPES = {cls.__name__: cls for cls in (ev.ReplyStarted, ev.ContextTrimmed, ev.SpeculationChanged, ev.TokenEmitted,
                                       ev.DraftRejected, ev.StepVerified, ev.ReplyFinished)}


def dump(events: list[object]) -> list[dict]:
    return [{"type": type(e).__name__, **dataclasses.asdict(e)} for e in events]


def load(path: Path = FIXTURE) -> tuple[str, list[object]]:
    data = json.loads(path.read_text())
    out = []
    for row in data["events"]:
        kind = TYPES[row.pop("type")]
        if "speculation" in row:
            row["speculation"] = ev.SpeculationState(**row["speculation"])
        if kind is ev.TokenEmitted:
            row["kind"] = ev.TokenKind(row["kind"])
        if kind is ev.DraftRejected:
            row["tokens"] = tuple(row["tokens"])
        if kind is ev.ReplyFinished:
            row["stats"] = ReplyStats(**row["stats"])
        out.append(kind(**row))
    return data["prompt"], out


def record() -> None:
    from specchat.engine import Engine
    from specchat.profiles import load_profile, run_config

    engine = Engine(run_config(load_profile("tiny")))
    try:
        events = list(engine.reply(PROMPT, max_tokens=80))
    finally:
        engine.close()
    FIXTURE.write_text(json.dumps({"prompt": PROMPT, "events": dump(events)}, indent=0))


if __name__ == "__main__":
    record()
