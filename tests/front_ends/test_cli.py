"""``specchat ask`` end to end, as a user runs it."""

from __future__ import annotations

import json

import pytest

from helpers import cli

# The default profile drafts from the user's stored chats: a test reads and indexes its own folder's, never the real ones.
pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")


@pytest.mark.parametrize("method", ["draft", "ngram", "none"])
def test_ask_json_stream_is_complete_and_consistent(method):
    result = cli("ask", "--profile", "tiny", "--json", "--method", method, "--max-tokens", "40",
                 "List three animals that live in the sea.")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["type"] for r in rows} <= {"started", "speculation", "token", "rejected", "step", "threads", "summary"}
    assert rows[0]["type"] == "started" and rows[0]["prompt_tokens"] == rows[0]["reused_tokens"] + rows[0]["prefill_tokens"]
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["method"] == method
    tokens = [r for r in rows if r["type"] == "token"]
    rejected = [r for r in rows if r["type"] == "rejected"]
    assert summary["generated"] == len(tokens)
    assert summary["accepted"] + summary["rejected"] == summary["drafted"]
    assert summary["rejected"] == sum(len(r["tokens"]) for r in rejected)
    steps = [r for r in rows if r["type"] == "step"]
    assert summary["steps"] == len(steps) and [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert summary["drafted"] == sum(s["drafted"] for s in steps)
    assert summary["accepted"] == sum(s["accepted"] for s in steps)
    assert all("top" not in t for t in tokens), "candidates only with --probs"
    for kind, count in summary["by_kind"].items():
        assert count == sum(1 for t in tokens if t["kind"] == kind)
    for key in ("acceptance_rate", "mean_acceptance_length", "position_rates", "t_prefill", "t_draft", "t_verify",
                "t_overhead", "ttft", "decode_tps", "prefill_tokens", "speculation_active", "speculation_reason"):
        assert key in summary
    assert summary["speculation_active"] == (method != "none")
    if method == "draft":
        assert summary["drafted"] > 0


def test_ask_plain_output_and_baseline_are_identical_text():
    spec = cli("ask", "--profile", "tiny", "--max-tokens", "30", "What is the capital of France?")
    plain = cli("ask", "--profile", "tiny", "--method", "none", "--max-tokens", "30", "What is the capital of France?")
    assert spec.returncode == 0 and plain.returncode == 0
    reply_spec, summary_spec = spec.stdout.rstrip("\n").rsplit("\n", 1)
    reply_plain, summary_plain = plain.stdout.rstrip("\n").rsplit("\n", 1)
    assert reply_spec == reply_plain and "\x1b[" not in spec.stdout  # not a TTY: no colour codes
    assert summary_spec.startswith("[draft n_max=4]") and "accepted" in summary_spec
    assert summary_plain.startswith("[none]") and "speculation off" in summary_plain


GHOST, AMBER = "\x1b[2;9m", "\x1b[38;5;214m"


def test_ask_ghosts_sit_between_the_accepted_tokens_and_the_correction():
    result = cli("ask", "--profile", "tiny", "--color", "always", "--ghosts", "--max-tokens", "96",
                 "List five countries in Europe and their capitals.")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    ghosts = [i for i in range(len(out)) if out.startswith(GHOST, i)]
    assert len(ghosts) > 3
    for i in ghosts:
        after = out[out.index("\x1b[0m", i) + len("\x1b[0m"):]
        # Right after a ghost: the correction (amber), or the summary when the correction ended the reply.
        assert after.startswith(AMBER) or after.startswith("\n"), repr(out[i:i + 80])


def test_json_rejected_rows_come_between_the_steps_accepted_tokens_and_its_correction():
    result = cli("ask", "--profile", "tiny", "--json", "--max-tokens", "96",
                 "List five countries in Europe and their capitals.")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    mixed = 0
    for i, row in enumerate(rows):
        if row["type"] != "rejected":
            continue
        after = rows[i + 1]
        # Its correction, or the step's counts when the correction ended the reply.
        assert (after["type"] == "step" or after["kind"] == "corrected") and after["step"] == row["step"]
        before = rows[i - 1]
        mixed += before["type"] == "token" and before["kind"] == "accepted" and before["step"] == row["step"]
    assert mixed > 0, "a step with accepted tokens before its rejected tail"


def test_ctrl_c_during_ask_prints_the_partial_summary_and_exits_130():
    import os
    import signal
    import subprocess
    import sys
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "specchat", "ask", "--max-tokens", "2000", "Write a very long story about the sea."],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        first = process.stdout.read(40)  # the reply has started streaming
        assert first
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    summary = (first + rest).rstrip("\n").rsplit("\n", 1)[-1]
    assert summary.startswith("[suffix+draft n_max=auto]")  # the default profile's method
    assert "cancelled" in summary and "tokens" in summary
    assert "Traceback" not in err


def test_ask_joins_piped_text_to_the_prompt_as_llm_does():
    notes = "Meeting notes: the launch moves to Friday; Ana owns the release checklist."
    piped = cli("ask", "--json", "--max-tokens", "24", "Who owns the release checklist? Answer with a name.", stdin=notes)
    assert piped.returncode == 0, piped.stderr
    rows = [json.loads(line) for line in piped.stdout.splitlines()]
    assert rows[-1]["prompt_tokens"] > 30  # the notes reached the model with the question
    only = cli("ask", "--json", "--max-tokens", "8", "-", stdin="Say hello.")
    assert only.returncode == 0 and json.loads(only.stdout.splitlines()[-1])["generated"] > 0
    nothing = cli("ask", "-", stdin="")
    assert nothing.returncode == 2 and "nothing to answer" in nothing.stderr
