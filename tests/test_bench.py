"""``specchat bench`` end to end on a small task file: a well-formed, internally consistent report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from specchat.bench.tasks import Task
from specchat.engine.auto import VerifyCost
from test_bad_input import cli

TWO_TASKS = """
[[task]]
name = "copy"
kind = "copy"
copy_heavy = true
max_tokens = 32
prompt = "Repeat exactly: alpha beta gamma delta epsilon zeta eta theta."

[[task]]
name = "chat"
max_tokens = 32
prompt = "Write a short welcome note for the team."
history = [
  { role = "user", content = "We are the night shift." },
  { role = "assistant", content = "Nice to meet you, night shift!" },
]
"""


@pytest.fixture
def task_file(tmp_path) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(TWO_TASKS)
    return path


def _bench(tmp_path: Path, *args: str):
    out = tmp_path / "report.json"
    result = cli("bench", "--repeat", "1", "--json", str(out), *args)
    report = json.loads(out.read_text()) if out.exists() else None
    return result, report


def _check_specchat_rows(report: dict) -> None:
    runs = [r for r in report["runs"] if r["runner"].startswith("specchat")]
    assert len(runs) == 2 * 2 * 2  # tasks × (warm-up + 1 repetition) × (speculation, plain)
    rows = {(r["task"], r["runner"]): r for r in report["summary"]}
    for task in ("copy", "chat"):
        spec, plain = rows[(task, "specchat draft")], rows[(task, "specchat none")]
        measured = {r["runner"]: r for r in runs if r["task"] == task and r["rep"] == 0}
        a, b = measured["specchat draft"], measured["specchat none"]
        assert spec["decode_tps_median"] == a["decode_tps"] and plain["decode_tps_median"] == b["decode_tps"]
        assert spec["speedup"] == pytest.approx(a["decode_tps"] / b["decode_tps"])
        assert spec["speedup_total"] == pytest.approx(b["total"] / a["total"])
        assert spec["drafted"] == a["drafted"] > 0 and spec["accepted"] == a["accepted"] <= a["drafted"]
        assert spec["acceptance_rate"] == pytest.approx(a["accepted"] / a["drafted"])
        assert a["tokens"] == b["tokens"] and spec["same_output"] is True  # greedy: identical output
        assert plain["drafted"] is None and plain["speedup"] is None
        for run in (a, b):
            assert run["ttft"] > 0 and run["total"] >= run["ttft"] and run["generated"] == len(run["tokens"])
            assert run["peak_rss"] > 50e6  # at least the models' weights
    assert report["output_changed"] == []
    assert report["profile"]["name"] == "tiny" and report["machine"]["cores"] >= 1


def test_bench_without_peers(tmp_path, task_file):
    plot = tmp_path / "plot.svg"
    result, report = _bench(tmp_path, "--tasks", str(task_file), "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    _check_specchat_rows(report)
    assert "[1/2] copy" in result.stderr and "run 1/1" in result.stderr  # progress while it runs
    assert "specchat draft" in result.stdout and "decode tok/s" in result.stdout
    assert plot.read_text().lstrip().startswith("<?xml") and "<svg" in plot.read_text()
    # The chat task carried its history: its prompt is longer than the copy task's.
    prefill = {r["task"]: r["extra"]["prefill_tokens"] for r in report["runs"] if r["rep"] == 0}
    assert prefill["chat"] > prefill["copy"] - 10


def test_bench_with_a_peer(tmp_path, task_file):
    result, report = _bench(tmp_path, "--tasks", str(task_file), "--peers", "llama-cpp-python")
    assert result.returncode == 0, result.stderr
    _check_specchat_rows(report)
    peer_rows = [r for r in report["summary"] if r["runner"] == "llama-cpp-python"]
    assert {r["task"] for r in peer_rows} == {"copy", "chat"}
    base = {r["task"]: r for r in report["summary"] if r["runner"] == "specchat none"}
    for row in peer_rows:
        assert row["speedup"] == pytest.approx(row["decode_tps_median"] / base[row["task"]]["decode_tps_median"])
        assert isinstance(row["same_output"], bool)
    assert len([r for r in report["runs"] if r["runner"] == "llama-cpp-python"]) == 4  # 2 tasks × (warm-up + 1)


def test_unknown_task_file_is_one_clear_line(tmp_path):
    result, report = _bench(tmp_path, "--tasks", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and report is None
    assert result.stderr.strip() == f"specchat: error: task file not found: {tmp_path / 'nope.toml'} — give a TOML file with [[task]] tables, or omit --tasks"


def test_malformed_task_is_skipped_with_one_line(tmp_path, task_file):
    task_file.write_text(TWO_TASKS + '\n[[task]]\nname = "bad"\nmax_tokens = -4\nprompt = "x"\n')
    result, report = _bench(tmp_path, "--tasks", str(task_file))
    assert result.returncode == 0
    assert "skipped:" in result.stderr and "task bad: max_tokens must be an integer ≥ 1, got -4" in result.stderr
    assert {r["task"] for r in report["summary"]} == {"copy", "chat"}
    assert any("task bad" in e for e in report["errors"])


@pytest.mark.parametrize(("binary", "message"), [("/nonexistent/llama-server", "not found"), ("/bin/false", "exited at start (code 1)")])
def test_broken_peer_binary_is_one_line_and_the_bench_goes_on(tmp_path, task_file, binary, message):
    result, report = _bench(tmp_path, "--tasks", str(task_file), "--peers", f"llama-server={binary}")
    assert result.returncode == 0, result.stderr
    peer_lines = [line for line in result.stderr.splitlines() if line.startswith("peer skipped")]
    assert len(peer_lines) == 1 and message in peer_lines[0]
    _check_specchat_rows(report)
    assert [e for e in report["errors"] if message in e]


def test_bad_bench_arguments(tmp_path, task_file):
    bad_plot = cli("bench", "--tasks", str(task_file), "--plot", str(tmp_path / "x.txt"))
    assert bad_plot.returncode == 2 and "--plot must end in .png or .svg" in bad_plot.stderr
    bad_peer = cli("bench", "--peers", "ollama")
    assert bad_peer.returncode == 2 and "unknown peer 'ollama'" in bad_peer.stderr


def test_bench_with_llama_server_peers_through_the_server_backend(tmp_path, task_file, llama_server):
    """The peers are the same backend code as a server profile, alternated with specchat's runs."""
    result, report = _bench(tmp_path, "--profile", "ngram", "--tasks", str(task_file),
                            "--peers", f"llama-server={llama_server}")
    assert result.returncode == 0, result.stderr
    rows = {(r["task"], r["runner"]): r for r in report["summary"]}
    for task in ("copy", "chat"):
        for peer in ("llama-server none", "llama-server ngram-simple", "llama-server ngram-map-k", "llama-server ngram-mod"):
            assert rows[(task, peer)]["speedup"] > 0
        # Plain decoding through the server is specchat's own, token for token.
        assert rows[(task, "llama-server none")]["same_output"] is True
    runs = [r for r in report["runs"] if r["task"] == "copy" and r["rep"] == 0]
    assert len({r["runner"] for r in runs}) == 6  # specchat none and ngram, four server types: side by side
    assert "speed-up against specchat's plain decoding" in result.stdout


def _ngram_replay():
    path = Path(__file__).parents[1] / "benchmarks" / "ngram_replay.py"
    spec = importlib.util.spec_from_file_location("ngram_replay", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_replay_match_table_on_worked_examples(make_engine):
    """The bound quoted for draft-length policies that see only the match length: on a reply that copies its prompt,
    the best table drafts the whole copy at once, as the oracle does; when a batch costs its tokens decoded one by one,
    no table beats plain decoding."""
    from specchat.engine.drafters.ngram import NgramDrafter

    replay = _ngram_replay()
    rules, drafter = make_engine("ngram", n_max=4).speculation.rules, NgramDrafter(2, 4)
    task = Task(name="t", prompt="", max_tokens=64)
    copying = replay.Reply(task, prompt=list(range(100, 110)), tokens=list(range(100, 110)))
    flat = VerifyCost((1, 64), (1.0, 1.0), exact=64)
    linear = VerifyCost((1, 64), (1.0, 64.0), exact=64)
    # One plain step (no 2-token key yet), then the other eight tokens copied in one step with the bonus: 9 in 2.
    assert replay.match_table(copying, flat, rules, drafter) == pytest.approx(4.5)
    assert replay.replay(copying, replay.ORACLE, flat, rules, drafter) == pytest.approx(4.5)
    assert replay.match_table(copying, linear, rules, drafter) == pytest.approx(1.0)


def test_the_replay_copy_ceiling_on_worked_examples():
    """The ceiling quoted for prompt-lookup drafting, on replies whose best plans can be written down by hand."""
    replay = _ngram_replay()
    task = Task(name="t", prompt="", max_tokens=64)
    copying = replay.Reply(task, prompt=list(range(100, 110)), tokens=list(range(100, 110)))
    fresh = replay.Reply(task, prompt=list(range(100, 110)), tokens=list(range(200, 210)))
    flat = VerifyCost((1, 64), (1.0, 1.0), exact=64)
    linear = VerifyCost((1, 64), (1.0, 64.0), exact=64)
    # The first token comes from the prefill; one flat-cost step verifies the other 9, copied from the prompt.
    assert replay.copy_ceiling(copying, flat) == pytest.approx(9.0)
    # When a batch costs as much as its tokens decoded one by one, no plan beats plain decoding.
    assert replay.copy_ceiling(copying, linear) == pytest.approx(1.0)
    # Nothing to copy: every step is plain, whatever a batch costs.
    assert replay.copy_ceiling(fresh, flat) == pytest.approx(1.0)
    # A verify batch no larger than 4 rows: 9 tokens in steps of at most 4 (3 + 1 bonus each) take 3 steps.
    assert replay.copy_ceiling(copying, VerifyCost((1, 4), (1.0, 1.0), exact=4)) == pytest.approx(3.0)
    # A copy reaches no further than the text known at its step: ten equal tokens copy 1, then 3, then the last 2.
    repeating = replay.Reply(task, prompt=[5], tokens=[7] * 10)
    assert replay.copy_ceiling(repeating, flat) == pytest.approx(3.0)
