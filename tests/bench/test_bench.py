"""``specchat bench`` end to end on a small task file: a well-formed, internally consistent report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from specchat.bench.simulation import ngram
from specchat.bench.simulation import suffix, trees
from specchat.bench.tasks import Task
from specchat.chats.store import Store
from specchat.engine.draft_length.auto_length import Adaptive
from specchat.engine.draft_length.policies import VerifyCost
from specchat.engine.draft_length.learned_costs import LearnedVerifyCost
from specchat.engine.draft_length.learned_store import LearnedStore
from specchat.engine.drafters.ngram import NgramDrafter
from helpers import cli

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
earlier = [
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
    result = cli("bench", "--profile", "tiny", "--repeat", "1", "--json", str(out), *args)  # args may name another
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
    assert report["profile"]["name"] == "tiny"
    # the cores the run could use (a cpuset, taskset: this test worker's), beside the machine's
    machine = report["machine"]
    assert machine["cores"] == len(os.sched_getaffinity(0)) and machine["machine_cores"] == os.cpu_count()


def test_bench_with_a_peer_and_a_broken_one(tmp_path, task_file):
    """A bench run loads the models and alternates its runners (about 7 s here), so one run makes the assertions of
    three cases: specchat's own rows, a peer that runs, and a peer whose binary exits at start."""
    plot = tmp_path / "plot.svg"
    result, report = _bench(tmp_path, "--tasks", str(task_file), "--plot", str(plot),
                            "--peers", "llama-cpp-python,llama-server=/bin/false")
    assert result.returncode == 0, result.stderr
    _check_specchat_rows(report)
    assert "[1/2] copy" in result.stderr and "run 1/1" in result.stderr  # progress while it runs
    assert "specchat draft" in result.stdout and "decode tok/s" in result.stdout
    assert plot.read_text().lstrip().startswith("<?xml") and "<svg" in plot.read_text()
    # The chat task carried its earlier turns: its prompt is longer than the copy task's.
    prefill = {r["task"]: r["extra"]["prefill_tokens"] for r in report["runs"]
               if r["rep"] == 0 and r["runner"].startswith("specchat")}
    assert prefill["chat"] > prefill["copy"] - 10
    # The peer that runs: a row per task, compared with specchat's plain decoding.
    peer_rows = [r for r in report["summary"] if r["runner"] == "llama-cpp-python"]
    assert {r["task"] for r in peer_rows} == {"copy", "chat"}
    base = {r["task"]: r for r in report["summary"] if r["runner"] == "specchat none"}
    for row in peer_rows:
        assert row["speedup"] == pytest.approx(row["decode_tps_median"] / base[row["task"]]["decode_tps_median"])
        assert isinstance(row["same_output"], bool)
    assert len([r for r in report["runs"] if r["runner"] == "llama-cpp-python"]) == 4  # 2 tasks × (warm-up + 1)
    # The peer that cannot start: one line, and the bench goes on without it.
    broken_peer_said(result, report, "exited at start (code 1)")


def broken_peer_said(result, report, message: str) -> None:
    peer_lines = [line for line in result.stderr.splitlines() if line.startswith("peer skipped")]
    assert len(peer_lines) == 1 and message in peer_lines[0]
    assert [e for e in report["errors"] if message in e]


def test_unknown_task_file_is_one_clear_line(tmp_path):
    result, report = _bench(tmp_path, "--tasks", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and report is None
    assert result.stderr.strip() == f"specchat: error: task file not found: {tmp_path / 'nope.toml'} — give a TOML file with [[task]] tables, or omit --tasks"


def test_a_malformed_task_and_a_missing_peer_binary_are_one_line_each_and_the_bench_goes_on(tmp_path, task_file):
    task_file.write_text(TWO_TASKS + '\n[[task]]\nname = "bad"\nmax_tokens = -4\nprompt = "x"\n')
    result, report = _bench(tmp_path, "--tasks", str(task_file), "--peers", "llama-server=/nonexistent/llama-server")
    assert result.returncode == 0, result.stderr
    assert "skipped:" in result.stderr and "task bad: max_tokens must be an integer ≥ 1, got -4" in result.stderr
    assert {r["task"] for r in report["summary"]} == {"copy", "chat"}
    assert any("task bad" in e for e in report["errors"])
    broken_peer_said(result, report, "not found")
    _check_specchat_rows(report)


def test_a_task_written_with_history_names_the_key_it_is_now(tmp_path, task_file):
    """"history" names the stored chats (``--history``); a task's turns before its prompt are ``earlier``."""
    from specchat.bench.tasks import load_tasks

    path = tmp_path / "old.toml"
    path.write_text(TWO_TASKS.replace("earlier = [", "history = ["))
    tasks, problems = load_tasks(path)
    assert [t.name for t in tasks] == ["copy"] and len(problems) == 1
    assert problems[0].endswith("task chat: 'history' is called 'earlier' now (the turns before the prompt) — rename the"
                                " key"), problems
    assert [m.role for m in load_tasks(task_file)[0][1].earlier] == ["user", "assistant"]


def test_bad_bench_arguments(tmp_path, task_file):
    bad_plot = cli("bench", "--tasks", str(task_file), "--plot", str(tmp_path / "x.txt"))
    assert bad_plot.returncode == 2 and "--plot must end in .png or .svg" in bad_plot.stderr
    bad_peer = cli("bench", "--peers", "ollama")
    assert bad_peer.returncode == 2 and "unknown peer 'ollama'" in bad_peer.stderr
    bad_type = cli("bench", "--peers", "llama-server", "--server-types", "ngram-mod ngram-fancy")
    assert bad_type.returncode == 2 and "--server-types: unknown spec type 'ngram-fancy'" in bad_type.stderr
    no_server = cli("bench", "--server-types", "ngram-mod")
    assert no_server.returncode == 2 and "add --peers llama-server" in no_server.stderr


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


def test_the_candidate_tree_simulation_on_a_worked_example():
    """Two earlier occurrences of "7 9 1 2" go on differently (3 first, then 4, the newer): the chain verifies the newer,
    wrong continuation; a tree of two verifies both, and the older one is right. Worked by hand for a 3-token reply
    (its first token from the prefill): the chain takes two steps (a correction, then a copied token whose bonus lies
    beyond the reply), the tree one (4 rows: both branches and the target's token; both reply tokens accepted)."""
    prompt = [7, 9, 1, 2, 3, 6, 50, 7, 9, 1, 2, 4, 6, 51, 7, 9, 1]
    reply = ngram.Reply(Task(name="t", prompt="", max_tokens=64), prompt=prompt, tokens=[2, 3, 6])
    seen: dict = {}
    for pos in range(len(prompt) + 1):
        trees.remember(prompt + [2], pos, seen)
    assert trees.branches(prompt + [2], len(prompt) + 1, seen, 2, 3) == [[4, 6, 51], [3, 6, 50]]
    flat = VerifyCost((1, 8), (1.0, 1.0), exact=8)
    assert trees.speed_up(reply, flat, (1,)) == pytest.approx(1.0)
    assert trees.speed_up(reply, flat, (1, 2)) == pytest.approx(2.0)
    # When each row costs a step, the tree's extra rows cost more than they save: 2 tokens for 4 rows.
    assert trees.speed_up(reply, VerifyCost((1, 8), (1.0, 8.0), exact=8), (1, 2)) == pytest.approx(0.5)


def test_the_suffix_simulation_steps_the_engines_own_auto_over_a_stored_reply(make_engine, tmp_path):
    """A question asked again, its earlier answer indexed as a stored chat is: where verifying costs nothing more per
    row, the engine's "auto" (hazards of its own for stored copies) copies the stored answer and runs well above plain
    decoding, within its drafter's oracle, while the open conversation alone offers nothing to copy; where each row
    costs a plain step, no draft can pay and "auto" verifies none (exactly plain decoding's cost)."""
    engine = make_engine("ngram", n_max=4)
    target, rules = engine.target, engine.speculation.rules
    question = "What is a hash table?"
    rendered = engine.template.render([{"role": "user", "content": question}], add_generation_prompt=True)
    answer = target.tokenize("A hash table maps keys to values through a hash function, so that a lookup takes"
                             " constant time on average, whatever the number of entries.", add_special=False)
    task = Task(name="asked-again", prompt=question, max_tokens=64)
    reply = ngram.Reply(task, prompt=target.tokenize(rendered, add_special=False), tokens=answer)
    drafter = suffix.ColdSuffix(NgramDrafter(2, 4), suffix.indexed(engine, [reply], tmp_path))
    assert drafter.stored_chats.index.documents == 1

    def auto(verify: VerifyCost) -> float:
        policy = Adaptive.open(LearnedVerifyCost(verify), True, {"ngram": 64, "draft": 16}, None,
                               LearnedStore(tmp_path / f"memory-{verify.seconds[-1]}.json"), "auto|t", "costs|t", 0,
                               recalls=True)
        return suffix.simulate_auto(reply, policy, verify, rules, drafter)

    flat = VerifyCost((1, 65), (1.0, 1.0), exact=65)
    oracle = ngram.simulate(reply, ngram.ORACLE, flat, rules, drafter)
    alone = ngram.simulate(reply, ngram.ORACLE, flat, rules, NgramDrafter(2, 4))
    assert oracle >= auto(flat) > 2.0 > 1.2 > alone
    assert auto(VerifyCost((1, 65), (1.0, 65.0), exact=65)) == pytest.approx(1.0)


def test_the_simulations_match_table_on_worked_examples(make_engine):
    """The bound quoted for draft-length policies that see only the match length: on a reply that copies its prompt,
    the best table drafts the whole copy at once, as the oracle does; when a batch costs its tokens decoded one by one,
    no table beats plain decoding."""
    rules, drafter = make_engine("ngram", n_max=4).speculation.rules, NgramDrafter(2, 4)
    task = Task(name="t", prompt="", max_tokens=64)
    copying = ngram.Reply(task, prompt=list(range(100, 110)), tokens=list(range(100, 110)))
    flat = VerifyCost((1, 64), (1.0, 1.0), exact=64)
    linear = VerifyCost((1, 64), (1.0, 64.0), exact=64)
    # One plain step (no 2-token key yet), then the other eight tokens copied in one step with the bonus: 9 in 2.
    assert ngram.match_table(copying, flat, rules, drafter) == pytest.approx(4.5)
    assert ngram.simulate(copying, ngram.ORACLE, flat, rules, drafter) == pytest.approx(4.5)
    assert ngram.match_table(copying, linear, rules, drafter) == pytest.approx(1.0)


def test_the_simulations_copy_ceiling_on_worked_examples():
    """The ceiling quoted for prompt-lookup drafting, on replies whose best plans can be written down by hand."""
    task = Task(name="t", prompt="", max_tokens=64)
    copying = ngram.Reply(task, prompt=list(range(100, 110)), tokens=list(range(100, 110)))
    fresh = ngram.Reply(task, prompt=list(range(100, 110)), tokens=list(range(200, 210)))
    flat = VerifyCost((1, 64), (1.0, 1.0), exact=64)
    linear = VerifyCost((1, 64), (1.0, 64.0), exact=64)
    # The first token comes from the prefill; one flat-cost step verifies the other 9, copied from the prompt.
    assert ngram.copy_ceiling(copying, flat) == pytest.approx(9.0)
    # When a batch costs as much as its tokens decoded one by one, no plan beats plain decoding.
    assert ngram.copy_ceiling(copying, linear) == pytest.approx(1.0)
    # Nothing to copy: every step is plain, whatever a batch costs.
    assert ngram.copy_ceiling(fresh, flat) == pytest.approx(1.0)
    # A verify batch no larger than 4 rows: 9 tokens in steps of at most 4 (3 + 1 bonus each) take 3 steps.
    assert ngram.copy_ceiling(copying, VerifyCost((1, 4), (1.0, 1.0), exact=4)) == pytest.approx(3.0)
    # A copy reaches no further than the text known at its step: ten equal tokens copy 1, then 3, then the last 2.
    repeating = ngram.Reply(task, prompt=[5], tokens=[7] * 10)
    assert ngram.copy_ceiling(repeating, flat) == pytest.approx(3.0)


# Spec-Bench -------------------------------------------------------------------------------------------------------


def test_spec_bench_sample_runs_both_turns_and_reports_per_category(tmp_path):
    """Two of Spec-Bench's questions end to end on the bundled model: 81 (writing, MT-bench, two turns) and 321 (qa)."""
    result, report = _bench(tmp_path, "--suite", "spec-bench", "--questions", "81,321", "--max-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert [t for t in report["settings"]["questions"]] == ["writing-81", "qa-321"]
    assert report["categories"] == {"writing-81": "writing", "qa-321": "qa"}
    measured = {(r["task"], r["runner"]): r for r in report["runs"] if r["rep"] == 0}
    spec, plain = measured[("writing-81", "specchat draft")], measured[("writing-81", "specchat none")]
    for run in (spec, plain):
        assert run["extra"]["turns"] == 2 and len(run["extra"]["generated_turns"]) == 2
        assert sum(run["extra"]["generated_turns"]) == run["generated"] == len(run["tokens"])
        first, second = run["extra"]["prompt_turns"]
        # The second turn's prompt holds the first turn and the runner's own reply to it, whose tokens are in the
        # KV cache already: the second prefill decodes only the new turn.
        assert second > first + run["extra"]["generated_turns"][0]
        assert run["extra"]["prefill_turns"][1] < second - first
        assert run["extra"]["ttft_turns"][0] == run["ttft"] > 0
    assert spec["tokens"] == plain["tokens"]  # greedy: both turns identical to plain decoding
    assert measured[("qa-321", "specchat none")]["extra"]["turns"] == 1
    rows = {(r["category"], r["runner"]): r for r in report["by_category"]}
    assert set(rows) == {(c, r) for c in ("writing", "qa", "overall") for r in ("specchat none", "specchat draft")}
    for category in ("writing", "qa"):
        task = next(t for t, c in report["categories"].items() if c == category)
        row, run, base = rows[(category, "specchat draft")], measured[(task, "specchat draft")], measured[(task, "specchat none")]
        assert row["speedup"] == pytest.approx(run["decode_tps"] / base["decode_tps"])
        assert row["acceptance_rate"] == pytest.approx(run["accepted"] / run["drafted"])
        # Each turn's first token comes from its prefill; a turn ended by the end-of-reply token spent a step on it.
        yielded = run["generated"] - run["extra"]["turns"] + run["extra"]["finish_turns"].count("stop")
        assert run["extra"]["step_tokens"] == yielded
        assert row["tokens_per_step"] == pytest.approx(yielded / run["extra"]["steps"])
        assert row["same_output"] is True and row["questions"] == 1
        assert rows[(category, "specchat none")]["tokens_per_step"] == pytest.approx(1.0)
    overall = rows[("overall", "specchat draft")]
    tps = [measured[(t, "specchat draft")]["decode_tps"] for t in ("writing-81", "qa-321")]
    base_tps = [measured[(t, "specchat none")]["decode_tps"] for t in ("writing-81", "qa-321")]
    assert overall["speedup"] == pytest.approx(sum(tps) / sum(base_tps)) and overall["questions"] == 2
    assert "category" in result.stdout and "tokens/step" in result.stdout and "overall" in result.stdout
    assert "runs, about" in result.stderr and "left" in result.stderr  # progress: runs done and the time left
    decode = [spec["extra"]["decode_s"], plain["extra"]["decode_s"]]
    assert all(d > 0 for d in decode)
    assert spec["decode_tps"] == pytest.approx((spec["generated"] - 2) / spec["extra"]["decode_s"])


def test_spec_bench_questions_are_drawn_per_category(tmp_path):
    """--per and --seed draw the same questions every time, per category in Spec-Bench's order (checked by the file
    itself, not by the reader under test)."""
    from specchat.bench.spec_bench import Selection, read_questions, select, suite_path

    lines = [json.loads(line) for line in suite_path().read_text().splitlines()]
    assert len(lines) == 480
    tasks, problems = read_questions(suite_path())
    assert problems == [] and len(tasks) == 480
    assert sum(1 for t in tasks if t.follow_ups) == 80  # MT-bench's two-turn questions
    picked = select(tasks, Selection(per=2, seed=3))
    assert len(picked) == 26 and picked == select(tasks, Selection(per=2, seed=3))
    assert [t.category for t in picked][::2] == list(dict.fromkeys(line["category"] for line in lines))
    assert select(tasks, Selection(per=2, seed=4)) != picked
    only = select(tasks, Selection(per=1, categories=("rag", "qa")))
    assert [t.category for t in only] == ["qa", "rag"]


def test_category_report_on_a_worked_example():
    """Spec-Bench's ratio of means, not a mean of ratios: two questions, plain 10 and 30 tok/s, speculative 20 and
    30 — the category's speed-up is 50/40 = 1.25 (a mean of ratios would say 1.5)."""
    from specchat.bench.categories import by_category

    def row(task, runner, tps, drafted=None, accepted=None, same=None):
        return {"task": task, "runner": runner, "decode_tps_median": tps, "drafted": drafted, "accepted": accepted,
                "same_output": same}

    def run(task, runner, generated, steps):
        return {"task": task, "runner": runner, "rep": 0, "generated": generated, "ttft": 0.1,
                "extra": {"turns": 1, "steps": steps, "step_tokens": generated - 1}}

    report = {
        "categories": {"a": "qa", "b": "qa"},
        "summary": [row("a", "specchat none", 10), row("b", "specchat none", 30),
                    row("a", "specchat ngram", 20, 8, 6, True), row("b", "specchat ngram", 30, 4, 1, True)],
        "runs": [run("a", "specchat none", 11, 10), run("b", "specchat none", 11, 10),
                 run("a", "specchat ngram", 11, 4), run("b", "specchat ngram", 11, 6)],
    }
    rows = {(r["category"], r["runner"]): r for r in by_category(report)}
    mine = rows[("qa", "specchat ngram")]
    assert mine["speedup"] == pytest.approx(1.25)
    assert mine["acceptance_rate"] == pytest.approx(7 / 12)
    assert mine["tokens_per_step"] == pytest.approx(20 / 10)
    assert rows[("qa", "specchat none")]["tokens_per_step"] == pytest.approx(1.0)
    assert rows[("overall", "specchat ngram")]["speedup"] == pytest.approx(1.25)


@pytest.mark.parametrize(("lines", "expected"), [
    (['{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}', "not json at all"],
     ":2: not a JSON object"),
    (['{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}', '{"question_id": 2, "category": "qa"}'],
     ":2: 'turns' is missing"),
    (['{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}',
      '{"question_id": 1, "category": "rag", "turns": ["Who wrote Macbeth?"]}'],
     ":2: question_id 1 is already at line 1"),
])
def test_malformed_question_lines_are_skipped_with_one_line_each(tmp_path, lines, expected):
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result, report = _bench(tmp_path, "--tasks", str(path), "--max-tokens", "8")
    assert result.returncode == 0, result.stderr
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 1 and f"{path}{expected}" in skipped[0]
    assert {r["task"] for r in report["summary"]} == {"qa-1"}  # the rest of the run went on
    assert any(expected in e for e in report["errors"])


@pytest.mark.parametrize(("args", "fragment"), [
    (("--suite", "spec-bench", "--categories", "poetry"), "--categories: unknown category 'poetry'"),
    (("--suite", "spec-bench", "--per", "11", "--categories", "writing"), "--per 11 is larger than category 'writing' (10 questions)"),
    (("--suite", "spec-bench", "--questions", "9999"), "--questions: no question with id 9999"),
    (("--per", "2",), "--per, --questions and --categories choose Spec-Bench questions"),
    (("--suite", "spec-bench", "--questions", "81", "--per", "1"), "give --questions or --per, not both"),
    (("--suite", "spec-bench", "--max-tokens", "0"), "--max-tokens must be ≥ 1, got 0"),
])
def test_impossible_spec_bench_choices_are_one_clear_line(tmp_path, args, fragment):
    from helpers import assert_one_clear_line

    result, report = _bench(tmp_path, *args)
    assert_one_clear_line(result, fragment)
    assert report is None


def test_a_file_whose_every_line_is_wrong_says_each_lines_own_reason(tmp_path):
    from helpers import assert_one_clear_line

    path = tmp_path / "question.jsonl"
    path.write_text('{"question_id": true, "category": "qa", "turns": ["Who wrote Hamlet?"]}\n'
                    '{"question_id": 1.5, "category": "qa", "turns": ["Who wrote Hamlet?"]}\n'
                    '{"question_id": 3, "category": "qa", "turns": ["Who wrote Hamlet?", " "]}\n')
    result, report = _bench(tmp_path, "--tasks", str(path))
    assert_one_clear_line(result, f"{path}: no question could be read", "line 1: 'question_id' is true",
                          "line 2: 'question_id' is 1.5", "line 3: turn 2 is empty")
    assert report is None


def test_a_choice_on_a_mixed_file_lists_the_lines_skipped_before_it_fails(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}\n'
                    '{"question_id": 7, "category": "qa", "turns": []}\n')
    result, report = _bench(tmp_path, "--tasks", str(path), "--questions", "7")
    assert result.returncode != 0 and "Traceback" not in result.stderr and report is None
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0] == f"skipped: {path}:2: 'turns' is empty — it must be a list of one or more questions"
    assert "--questions: no question with id 7" in lines[-1] and len(lines) == 2


@pytest.mark.parametrize(("flag", "value"), [("--categories", ","), ("--questions", ""), ("--questions", " , ")])
def test_an_empty_list_is_one_line_naming_its_flag_never_everything(tmp_path, flag, value):
    from helpers import assert_one_clear_line

    result, report = _bench(tmp_path, "--suite", "spec-bench", flag, value)
    assert_one_clear_line(result, f"{flag} is empty")
    assert report is None


@pytest.mark.usefixtures("isolated_user_dirs", "user_cache")
@pytest.mark.parametrize("store", ["damaged", "a folder"])
def test_a_store_that_cannot_take_the_saved_chats_keeps_the_finished_report(tmp_path, task_file, store):
    """The run's report and --json come first; a failure to save the chats is one line after them (exit 1)."""
    db = tmp_path / "data" / "specchat" / "chats.sqlite3"
    db.parent.mkdir(parents=True)
    if store == "damaged":
        db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    else:
        db.mkdir()
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    out = tmp_path / "r.json"
    result = cli("bench", "--profile", "tiny", "--tasks", str(task_file), "--repeat", "1", "--max-tokens", "4",
                 "--save-chats", "--json", str(out), env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert json.loads(out.read_text())["summary"] and "specchat draft" in result.stdout  # the report is whole
    [line] = [line for line in result.stderr.splitlines() if "not saved as chats" in line]
    assert line.startswith(f"specchat: the replies were not saved as chats: the chat database {db} ")
    assert result.stderr.rstrip().endswith(line)  # after everything else
    if store == "damaged":
        assert "damaged" in line and db.read_bytes().startswith(b"SQLite format 3")  # left as it was
    assert not list(db.parent.glob("*.damaged-*"))


def test_a_question_file_that_is_not_json_lines_is_one_clear_line(tmp_path):
    from helpers import assert_one_clear_line

    path = tmp_path / "question.jsonl"
    path.write_text("[[task]]\nname = 'toml, not json'\n")
    result, _ = _bench(tmp_path, "--tasks", str(path))
    assert_one_clear_line(result, f"{path}: no question could be read")


@pytest.mark.usefixtures("isolated_user_dirs", "user_cache")
def test_saved_bench_replies_are_drafted_from_by_a_later_run_beside_llama_servers_lookup_cache(tmp_path, llama_server):
    """--save-chats keeps each question's replies as a chat; a later run with --stored-chats drafts from them — specchat's
    "suffix" through its index, llama-server's ngram-cache through lookup caches written from the same replies — and
    the greedy output stays plain decoding's."""
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    sample = ("--profile", "suffix", "--suite", "spec-bench", "--questions", "81,321", "--max-tokens", "24",
              "--repeat", "1")
    first_json, second_json = tmp_path / "first.json", tmp_path / "second.json"
    first = cli("bench", *sample, "--save-chats", "--json", str(first_json), env=env)
    assert first.returncode == 0, first.stderr
    assert "saved 2 chats" in first.stderr
    store = Store(tmp_path / "data" / "specchat" / "chats.sqlite3")
    try:
        saved = {c.title: store.messages(c.id) for c in store.conversations()}
    finally:
        store.close()
    assert set(saved) == {"bench: writing-81", "bench: qa-321"}
    plain = {r["task"]: r for r in json.loads(first_json.read_text())["runs"]
             if r["runner"] == "specchat none" and r["rep"] == 0}
    writing = saved["bench: writing-81"]
    assert [m.role for m in writing] == ["user", "assistant", "user", "assistant"]  # both turns of MT-bench's
    assert [t for m in writing if m.role == "assistant" for t in m.tokens] == plain["writing-81"]["tokens"]
    assert all(m.target_id and m.finish_reason for m in writing if m.role == "assistant")

    second = cli("bench", *sample, "--stored-chats", "--peers", f"llama-server={llama_server}",
                 "--server-types", "ngram-mod ngram-cache", "--json", str(second_json), env=env)
    assert second.returncode == 0, second.stderr
    report = json.loads(second_json.read_text())
    assert report["settings"]["stored_chats"] is True and not report["errors"]
    assert report["settings"]["llama_server_warm"] is True
    assert {r["runner"] for r in report["runs"]} == {"specchat none", "specchat suffix", "llama-server ngram-mod",
                                                     "llama-server ngram-cache"}  # the types asked for
    rows = {(r["category"], r["runner"]): r for r in report["by_category"]}
    before = {(r["category"], r["runner"]): r for r in json.loads(first_json.read_text())["by_category"]}
    for category in ("writing", "qa"):
        recalled = rows[(category, "specchat suffix")]
        assert recalled["same_output"] is True and rows[(category, "llama-server ngram-cache")]["same_output"] is True
        # The same questions answered before: most of each reply comes from the stored one.
        assert recalled["tokens_per_step"] > 2 * before[(category, "specchat suffix")]["tokens_per_step"]
    server = [r for r in report["runs"] if r["runner"] == "llama-server ngram-cache" and r["rep"] == 0]
    assert len(server) == 2  # beside them, with the lookup caches (their effect: test_suffix.py's server test)
