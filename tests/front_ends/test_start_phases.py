"""The start says what it is doing (issue #47 item 6): a busy start spent over a minute timing verify batches and
measuring plain decoding under "deriving the draft model … 100 %". Each phase is named as it begins — in the app's
status line, the REPL's toolbar and `ask`'s stderr at a terminal — and a script's stderr stays quiet."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time

import pytest

from helpers import CTRL_D, run_repl, statuses_while_loading
from specchat import paths
from specchat.engine import phases
from specchat.engine.draft_length import costs
from specchat.repl.shell import TOOLBAR_REFRESH_S, ReplSettings

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")

TIMING = "timing the target's verify batches"
PLAIN = 'measuring plain decoding for "vs plain"'


@pytest.fixture
def first_costs(tmp_path, monkeypatch, user_cache):
    """No verify costs kept yet (the machine's first start, or a week on), in a new process's state."""
    monkeypatch.setattr(paths, "verify_costs_file", lambda: tmp_path / "fresh-costs.json")
    monkeypatch.setattr(costs, "_busy", {})
    monkeypatch.setattr(costs, "_probed", set())


def test_the_engine_names_each_phase_of_a_start_in_order(make_engine, first_costs):
    said: list[str] = []
    with phases.told(said.append):
        engine = make_engine("ngram", n_max="auto")
        engine.plain_reference()
    order = [next(i for i, line in enumerate(said) if line.startswith(start))
             for start in ("loading the target", TIMING, "timing how a step slows", PLAIN)]
    assert order == sorted(order), said


async def test_the_app_status_line_follows_the_phases(settings, first_costs):
    from specchat.app.chat_app import make_app

    async with make_app(settings).run_test(size=(120, 40)) as pilot:
        statuses = await statuses_while_loading(pilot)
    assert any(s.startswith(TIMING) for s in statuses) and any(s.startswith(PLAIN) for s in statuses), statuses
    assert statuses[-1] == ""


def test_the_repl_toolbar_names_the_phase_while_loading(tmp_path, first_costs):
    settings = ReplSettings("tiny", db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history",
                            max_tokens=4)

    heard: list[str] = []

    def slow_start(line: str) -> None:  # on the engine thread: the target's load takes a while, as on a busy machine
        # (held when the next phase begins: listeners hear a phase in turn, and the REPL's own listener comes after
        # this one — held at the target's line itself, the REPL heard it only after the wait, for a moment)
        if heard and heard[-1].startswith("loading the target"):
            time.sleep(2 * TOOLBAR_REFRESH_S + 0.5)
        heard.append(line)

    drawn: list[str] = []

    def watch_toolbar(repl) -> None:  # what the toolbar draws, read as prompt-toolkit reads it at each refresh
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (repl._loading is None or not repl._loading[0].done()):
            drawn.append("".join(text for _, text in repl._toolbar()))
            time.sleep(TOOLBAR_REFRESH_S / 5)

    with phases.told(slow_start):
        _, _, text = run_repl(settings, "", "Hi\r", CTRL_D, during=watch_toolbar)  # typed while the model loads
    assert any(line.startswith("loading tiny: loading the target SmolLM2") for line in drawn), drawn
    assert "loading the target" not in text  # the toolbar's, not a line of the transcript


def test_ask_names_the_phases_at_a_terminal_and_keeps_a_scripts_stderr_quiet(tmp_path, user_cache):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "fresh-cache")}  # no costs kept: every phase runs
    (tmp_path / "fresh-cache" / "specchat").mkdir(parents=True)
    for f in user_cache.glob("SmolLM2*"):  # the derived draft, so that deriving is not what is said
        (tmp_path / "fresh-cache" / "specchat" / f.name).write_bytes(f.read_bytes())
    command = [sys.executable, "-m", "specchat", "ask", "--profile", "tiny", "--max-tokens", "4", "Hi"]
    piped = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert piped.returncode == 0 and piped.stdout.strip() and piped.stderr == "", piped.stderr
    for f in (tmp_path / "fresh-cache" / "specchat").glob("verify-costs*"):
        f.unlink()
    leader, follower = pty.openpty()
    try:
        at_terminal = subprocess.run(command, stdout=subprocess.PIPE, stderr=follower, timeout=300, env=env,
                                     stdin=subprocess.DEVNULL)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(leader)
    lines = said.decode().splitlines()
    assert at_terminal.returncode == 0
    assert any(line.startswith(f"specchat: {TIMING}") for line in lines), lines
    assert any(line.startswith("specchat: loading the target") for line in lines), lines
