"""``specchat ask`` end to end, as a user runs it."""

from __future__ import annotations

import json

import pytest

from test_bad_input import cli


@pytest.mark.parametrize("method", ["draft", "ngram", "none"])
def test_ask_json_stream_is_complete_and_consistent(method):
    result = cli("ask", "--json", "--method", method, "--max-tokens", "40", "List three animals that live in the sea.")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["type"] for r in rows} <= {"token", "rejected", "summary"}
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["method"] == method
    tokens = [r for r in rows if r["type"] == "token"]
    rejected = [r for r in rows if r["type"] == "rejected"]
    assert summary["generated"] == len(tokens)
    assert summary["accepted"] + summary["rejected"] == summary["drafted"]
    assert summary["rejected"] == sum(len(r["tokens"]) for r in rejected)
    for kind, count in summary["by_kind"].items():
        assert count == sum(1 for t in tokens if t["kind"] == kind)
    for key in ("acceptance_rate", "mean_acceptance_length", "position_rates", "t_prefill", "t_draft", "t_verify",
                "t_overhead", "ttft", "decode_tps", "prefill_tokens", "speculation_active", "speculation_reason"):
        assert key in summary
    assert summary["speculation_active"] == (method != "none")
    if method == "draft":
        assert summary["drafted"] > 0


def test_ask_plain_output_and_baseline_are_identical_text():
    spec = cli("ask", "--max-tokens", "30", "What is the capital of France?")
    plain = cli("ask", "--method", "none", "--max-tokens", "30", "What is the capital of France?")
    assert spec.returncode == 0 and plain.returncode == 0
    reply_spec, summary_spec = spec.stdout.rstrip("\n").rsplit("\n", 1)
    reply_plain, summary_plain = plain.stdout.rstrip("\n").rsplit("\n", 1)
    assert reply_spec == reply_plain and "\x1b[" not in spec.stdout  # not a TTY: no colour codes
    assert summary_spec.startswith("[draft n_max=4]") and "accepted" in summary_spec
    assert summary_plain.startswith("[none]") and "speculation off" in summary_plain
