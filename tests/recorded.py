"""The one command that records again, from real runs of the bundled pair, what tests play back:

    python tests/recorded.py                 # every recorded test's cassette (tests/cassettes.py)
    python tests/recorded.py TEST_ID ...     # only these tests' cassettes
    python tests/recorded.py --reply         # the reply the snapshot tests draw (its timings move the snapshots)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
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


def record_cassettes(test_ids: list[str]) -> int:
    """Run the recorded tests on the real backend, each passing one writing its cassette whole (all of them: the
    cassettes of tests gone or renamed go too)."""
    from cassettes import ROOT

    if not test_ids:
        shutil.rmtree(ROOT, ignore_errors=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "recorded", *test_ids]
    root = Path(__file__).parent.parent
    return subprocess.run(command, cwd=root, env=os.environ | {"SPECCHAT_RECORDED": "record"}).returncode


if __name__ == "__main__":
    if sys.argv[1:] == ["--reply"]:
        record()
    else:
        sys.exit(record_cassettes(sys.argv[1:]))
