"""The token inspector and the step replay (issue "steer and inspect speculation with one key", sections 2 and 3):
what each token's candidates were, checked against llama-cpp-python's own high-level API decoding the same tokens; a
server's candidates against the engine's; the replay's steps against the trace's counts; in the app (Pilot), in the
REPL, through ``ask --json --probs`` and ``specchat replay``, on the in-process and the llama-server backends."""

from __future__ import annotations

import json
import math
import sqlite3

import llama_cpp
import numpy as np
import pytest

from backend_kinds import controller_for, write_profile
from specchat.chats.replay import NO_TRACE, Replay, judgement_of, step_lines, token_lines
from specchat.chats.trace import events_of, row_of
from specchat.engine.events import DraftRejected, StepVerified, TokenEmitted, TokenKind
from specchat.engine.sampling import SamplingParams
from helpers import THREADS, noticed

pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")
KINDS = ("in-process", "managed")
PROMPT = "List three animals that live in the sea."


class BareLlama:
    """The target through llama-cpp-python's low-level API (none of specchat's engine): a bare loop that decodes the
    same token ids one at a time, with the engine's q8_0 cache, and each position's softmax from its logits."""

    def __init__(self, path) -> None:
        from specchat.engine.cpu_probe import extra_buffers_work

        params = llama_cpp.llama_model_default_params()
        params.use_extra_bufts = extra_buffers_work()  # what the machine runs (a VM's AMX may not)
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx, cparams.n_threads, cparams.n_threads_batch = 2048, THREADS, THREADS
        cparams.type_k = cparams.type_v = llama_cpp.GGML_TYPE_Q8_0
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)

    def softmax_rows(self, tokens: list[int]) -> np.ndarray:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        rows = []
        for token in tokens:
            one = (llama_cpp.llama_token * 1)(token)
            assert llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(one, 1)) == 0
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))
            row = logits.astype(np.float64) - logits.max()
            rows.append(np.exp(row) / np.exp(row).sum())
        return np.array(rows)

    def close(self) -> None:
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


@pytest.fixture(scope="module")
def bare(target_path):
    llama = BareLlama(target_path)
    yield llama
    llama.close()


def shown_tokens(events) -> list[TokenEmitted]:
    return [e for e in events if isinstance(e, TokenEmitted)]


@pytest.mark.parametrize("method, spec, sampling", [
    ("draft", {"n_max": 4}, SamplingParams()),
    ("ngram", {"n_max": 4}, SamplingParams()),
    ("draft", {"n_max": 4}, SamplingParams(temperature=0.8, seed=3)),
    ("none", {}, SamplingParams()),
])
def test_each_tokens_candidates_are_the_targets_softmax_at_its_position(make_engine, bare, method, spec, sampling):
    engine = make_engine(method, sampling=sampling, **spec)
    engine.reply("Name two planets.", max_tokens=24, top=5)  # a second turn: the candidates deep in a chat
    events = list(engine.reply("Write it again, with the word 'été' and 🙂.", max_tokens=40, top=5))
    tokens = shown_tokens(events)
    reply_ids = [t.token for t in tokens]
    conversation = list(engine.tokens)
    start = len(conversation) - len(reply_ids) - (conversation[-1] not in reply_ids[-1:])  # an end token may follow
    assert conversation[start:start + len(reply_ids)] == reply_ids
    rows = bare.softmax_rows(conversation[:start + len(reply_ids)])
    kinds = set()
    for i, token in enumerate(tokens):
        j = token.judgement
        assert j is not None and len(j.top) == 5
        expected = rows[start + i - 1]  # the row after the token before it chose this one
        best = np.argsort(-expected)[:5]
        assert [c.token for c in j.top][:2] == list(best[:2]) or abs(j.top[0].p - j.top[1].p) < 0.01
        for c in j.top:
            assert c.p == pytest.approx(expected[c.token], abs=0.01), (i, token.text, c)
        assert all(a.p >= b.p for a, b in zip(j.top, j.top[1:]))
        if sampling.greedy:
            assert token.token == j.top[0].token  # greedy: the target's most likely token, whatever was drafted
        if j.drafted is not None:
            kinds.add(token.kind)
            assert j.drafted.p == pytest.approx(expected[j.drafted.token], abs=0.01)
            assert (j.drafted.token == token.token) == (token.kind is TokenKind.ACCEPTED)
            if method == "draft":
                assert j.draft_top and j.draft_p is not None and 0 < j.draft_p <= 1
                if sampling.greedy:
                    assert j.drafted.token == j.draft_top[0].token and j.accept is None and j.q is None
                else:  # judged through the sampling chain: its own p and q, and min(1, p/q) from them
                    assert j.accept == pytest.approx(min(1, j.p_sampled / j.q)) and 0 < j.q <= 1
        if method == "ngram" and j.drafted is not None:
            assert j.match >= 2 and j.copied  # the earlier text the draft copied
    if method != "none":
        assert TokenKind.CORRECTED in kinds or TokenKind.ACCEPTED in kinds
    for rejected in (e for e in events if isinstance(e, DraftRejected)):
        assert len(rejected.pieces) == len(rejected.tokens)


def test_candidates_change_nothing_the_reply_decodes(make_engine):
    engine = make_engine("draft", n_max=4)
    without = [(t.token, t.kind) for t in shown_tokens(engine.reply(PROMPT, max_tokens=40))]
    engine.new_chat()
    engine.clear_cache()
    with_top = [(t.token, t.kind) for t in shown_tokens(engine.reply(PROMPT, max_tokens=40, top=5))]
    assert with_top == without


def test_the_trace_round_trips_every_event(make_engine):
    engine = make_engine("draft", n_max=4)
    events = list(engine.reply("Écris « été » et 日本語 🙂.", max_tokens=40, top=3))
    rows = [row_of(e) for e in events]
    again = list(events_of(json.loads(json.dumps(r)) for r in rows))
    assert [row_of(e) for e in again] == rows
    assert {type(e) for e in again} >= {TokenEmitted, StepVerified}


def test_a_servers_candidates_are_the_engines_and_what_it_cannot_tell_is_said(tmp_path, llama_server, servers,
                                                                               make_engine):
    engine = make_engine("none")
    local = shown_tokens(engine.reply(PROMPT, max_tokens=24, top=5))
    plain = tmp_path / "plain"
    plain.mkdir()
    profile = write_profile(plain, "managed", binary=llama_server, servers=servers)
    profile.write_text(profile.read_text().replace('method = "draft"', 'method = "none"'))
    controller = controller_for(profile, max_tokens=24)
    try:
        served = shown_tokens(controller.backend.answer(_history(controller), PROMPT, max_tokens=24, top=5))
    finally:
        controller.close()
    assert [t.token for t in served] == [t.token for t in local]
    for ours, theirs in zip(local, served):
        assert [c.token for c in theirs.judgement.top][:1] == [c.token for c in ours.judgement.top][:1]
        for a, b in zip(ours.judgement.top, theirs.judgement.top):
            if a.token == b.token:
                assert b.p == pytest.approx(a.p, abs=0.02)
        assert not theirs.judgement.unknown  # a plain step: the server computed every candidate

    speculative = controller_for(write_profile(tmp_path, "managed", binary=llama_server, servers=servers),
                                 max_tokens=40)
    try:
        events = list(speculative.backend.answer(_history(speculative), PROMPT, max_tokens=40, top=5))
    finally:
        speculative.close()
    drafted = [t for t in shown_tokens(events) if t.kind is not TokenKind.TARGET]
    assert drafted and all("does not say which draft tokens it rejected" in t.judgement.unknown for t in drafted)
    assert any(not t.judgement.top and "sends no candidates" in t.judgement.unknown for t in drafted)


def _history(controller):
    from specchat.engine.conversation import Message

    system = controller.backend.config.system_prompt
    return [Message("system", system)] if system else []


def test_replay_steps_add_up_to_the_replys_counters(make_engine):
    engine = make_engine("draft", n_max=4)
    rows = [row_of(e) for e in engine.reply(PROMPT, max_tokens=40, top=5)]
    replay = Replay.of(rows)
    summary = rows[-1]
    assert replay.steps[0].number == 0 and [s.number for s in replay.steps] == list(range(len(replay.steps)))
    assert sum(s.verified.drafted for s in replay.steps[1:]) == summary["drafted"]
    assert sum(len(s.tokens) for s in replay.steps) == summary["generated"]
    for i, step in enumerate(replay.steps[1:], start=1):
        t = replay.telemetry_at(i)
        assert t.reply.drafted == sum(s.verified.drafted for s in replay.steps[1:i + 1])
        lines = step_lines(replay, i)
        assert lines[0].startswith(f"step {step.number}: ")
        if step.rejected is not None:
            assert any(line.startswith("  rejected tail: ") for line in lines)
    last = replay.telemetry_at(len(replay.steps) - 1)
    assert last.reply.accepted == summary["accepted"] and last.reply_tokens == summary["generated"]


def test_the_source_of_a_copy_is_found_in_the_turn_it_came_from():
    from specchat.chats.replay import copy_source

    texts = ["Repeat: the cat sat on the mat.", "The cat sat on", "the mat again and the cat sat"]
    # The copied tokens hold the template's role name before the user's text; its tail is the user's sentence.
    assert copy_source(texts, "user\nRepeat: the cat sat on the mat") == (0, 0, len("Repeat: the cat sat on the mat"))
    assert copy_source(texts, " cat sat") == (2, texts[2].rfind(" cat sat"), len(texts[2]))  # the latest one
    assert copy_source(texts, "zebra") is None and copy_source(texts, "xx a") is None


@pytest.mark.recorded
async def test_the_inspector_underlines_what_an_ngram_draft_copied(tmp_path, settings, cheap_verify):
    """An ngram profile drafts by the measured costs: a noisy sweep let it copy nothing here, and nothing was judged."""
    from helpers import SIZE, ask as ask_in_app, wait_until

    from specchat.app.chat_app import make_app
    from specchat.app.chat.inspector import Inspector
    from specchat.app.chat.reply import COPIED, UserMessage

    settings.profile, settings.max_tokens = "ngram", 40
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        sentence = "the quick brown fox jumps over the lazy dog near the old river bank"
        view = await ask_in_app(pilot, f"Repeat this sentence exactly: {sentence}")
        judged = [(i, judgement_of(view.record, i)) for i in range(len(view.record.segments))]
        copied = [i for i, j in judged if j is not None and j.copied and not j.remembered]
        assert copied, "the reply copied the sentence: n-gram drafts with a source"
        inspector = app.query_one(Inspector)
        inspector.open(view, copied[-1])
        await pilot.pause()
        source = inspector.copy_shown
        assert source is not None, "the source is underlined somewhere in the chat"
        if isinstance(source, UserMessage):
            underlined = [s for s in source.content.spans if s.style == COPIED]
            assert underlined and source.text[underlined[0].start:underlined[0].end] in judged[copied[-1]][1].copied
        else:
            assert COPIED in source.marks.values()
        assert "copied draft: matched " in str(inspector.render())
        await pilot.press("escape")
        await pilot.pause()
        assert inspector.copy_shown is None and not [s for s in app.query_one(UserMessage).content.spans
                                                      if s.style == COPIED]


def test_an_old_reply_without_a_trace_says_so():
    from specchat.chats.records import ReplyRecord

    record = ReplyRecord(segments=[("Hi", "target")], tokens=[1], finish_reason="stop")
    assert token_lines(record, 0) == [NO_TRACE]


# -- front ends ----------------------------------------------------------------------------------------------------


@pytest.mark.recorded
@pytest.mark.parametrize("kind", KINDS)
async def test_the_inspector_and_the_replay_in_the_app(kind, tmp_path, settings, llama_server, servers):
    from helpers import SIZE, ask as ask_in_app, at_rest, wait_until

    from specchat.app.chat_app import make_app
    from specchat.app.screens.replay_screen import ReplayScreen
    from specchat.app.chat.inspector import Inspector
    from specchat.app.chat.reply import SELECTED, ProvenanceLines

    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 32
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        await pilot.press("f8")
        await pilot.pause()
        await noticed(pilot, "no reply to inspect yet")
        view = await ask_in_app(pilot, PROMPT)
        record = view.record
        await pilot.press("f8")
        inspector = app.query_one(Inspector)
        await wait_until(pilot, lambda: inspector.display and inspector.has_focus)
        assert inspector.index == len(record.segments) - 1 and view.marks == {inspector.index: SELECTED}
        await pilot.press("left", "left")
        assert inspector.index == len(record.segments) - 3
        shown = str(inspector.render())
        assert shown.splitlines()[1:] == token_lines(record, inspector.index)[1:]
        if kind == "in-process":
            assert "target's top (softmax of its logits): " in shown
        kinds = [k for _, k in record.segments]
        drafted = next(i for i, k in enumerate(kinds) if k in ("accepted", "corrected"))
        inspector.open(view, drafted)
        await pilot.pause()
        shown = str(inspector.render())
        assert ("drafted " in shown) if kind == "in-process" else ("does not say which draft tokens" in shown)
        await pilot.press("escape")
        await pilot.pause()
        assert not inspector.display and view.marks == {} and app.busy is None

        await at_rest(pilot, view.query_one(ProvenanceLines))
        await pilot.click(view.query_one(ProvenanceLines), offset=(0, 0))  # the reply's first token
        await wait_until(pilot, lambda: inspector.display)
        assert inspector.view is view and inspector.index == 0

        await pilot.press("f9")
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayScreen))
        screen = app.screen
        steps = screen.replay.steps
        assert screen.index == 0
        await pilot.press("right", "right")
        assert screen.index == 2
        step = str(screen.query_one("#replay-step").render())
        assert step.startswith(f"step {steps[2].number}: ")
        drafted = sum(s.verified.drafted for s in steps[1:3])
        accepted = sum(s.verified.accepted for s in steps[1:3])
        side = " ".join(screen.query_one("Sidebar").plain.split())
        assert f"drafted accepted rejected {drafted} {accepted} {drafted - accepted} " in side
        await pilot.press("end")
        assert screen.index == len(steps) - 1
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ReplayScreen))

    # Reopened, the chat's replies are inspected and replayed from the store as they were live.
    settings.resume = True
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None and app.chat_view.chat_log.last_reply)
        reopened = app.chat_view.chat_log.last_reply.record
        assert reopened.trace == record.trace
        await pilot.press("f8")
        await wait_until(pilot, lambda: app.query_one(Inspector).display)
        assert str(app.query_one(Inspector).render()).splitlines()[1:] == token_lines(record, len(record.segments) - 1)[1:]


@pytest.mark.recorded
@pytest.mark.parametrize("kind", KINDS)
def test_inspect_and_replay_in_the_repl(kind, tmp_path, llama_server, servers):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    settings = ReplSettings(str(profile), db_path=tmp_path / "chats.sqlite3", max_tokens=32, color=False)
    repl, _, text = run_repl(settings, "/inspect\r", PROMPT + "\r", "/inspect\r", "/inspect 2\r", "/inspect -1\r",
                             "/inspect 999\r", "/replay 1\r", "/replay\r", "/replay 999\r", CTRL_D, pace=0.1)
    record = repl.session.last_reply
    assert "no reply to inspect yet" in text
    assert f"the last reply has {len(record.segments)} tokens" in text
    for line in token_lines(record, 1) + token_lines(record, len(record.segments) - 1):
        assert "  " + line in text
    assert f"usage: /inspect N — N from 1 to {len(record.segments)}" in text
    replay = Replay.of(record.trace)
    assert text.count(step_lines(replay, 1)[0]) == 2  # /replay 1, then within the whole /replay
    for i in range(len(replay.steps)):
        assert step_lines(replay, i)[0] in text
    assert "usage: /replay [STEP]" in text


def test_ask_probs_and_replay_json_print_the_same_lines(tmp_path, monkeypatch):
    """The live reply (``ask --json --probs 5``) and the same reply replayed from the store (``specchat replay
    --json``, after the REPL answered it) compare line by line: the same events, only the clocks differ."""
    from helpers import cli

    from specchat import paths

    live = cli("ask", "--profile", "tiny", "--json", "--probs", "5", "--max-tokens", "32", PROMPT)
    assert live.returncode == 0, live.stderr
    repl = cli("repl", "--profile", "tiny", "--max-tokens", "32", stdin=PROMPT + "\n")
    assert repl.returncode == 0, repl.stderr
    replayed = cli("replay", "--json")
    assert replayed.returncode == 0, replayed.stderr
    a, b = ([json.loads(line) for line in out.stdout.splitlines()] for out in (live, replayed))
    assert a[1]["top"] and len(a) > 10

    def timeless(rows):
        """Without the clocks, nor the machine's load (a busy machine makes the engine decode with fewer threads)."""
        return [{k: v for k, v in row.items() if k not in CLOCKS} for row in rows if row["type"] != "threads"]

    assert timeless(a) == timeless(b)
    text = cli("replay")
    assert text.returncode == 0 and text.stdout.splitlines()[1].startswith("step 0: the prompt's prefill chose ")
    listed = cli("replay", "--list")
    assert listed.returncode == 0 and PROMPT in listed.stdout
    for args, problem in ((("replay", "--reply", "7"), "--reply 7: chat 1 has 1 replies"),
                          (("replay", "no such chat"), "no stored chat is 'no such chat'"),
                          (("replay", "²"), "no stored chat is '²'"),  # a digit to isdigit(), not to int()
                          (("ask", "--probs", "5", "hi"), "--probs N needs --json")):
        bad = cli(*args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and problem in bad.stderr, bad.stderr
    db = paths.chats_db()
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE messages SET trace = ? WHERE role = 'assistant'", (b"not a trace",))
    damaged = cli("replay")
    assert damaged.returncode == 2 and NO_TRACE in damaged.stderr


CLOCKS = {"elapsed", "t_prefill", "t_draft", "t_verify", "t_total", "ttft", "t_last_token", "decode_tps",
          "t_overhead", "threads"}


@pytest.mark.recorded
async def test_the_replay_names_the_profile_the_reply_ran_under(settings):
    """The replay's sidebar named today's profile: a reply made under tiny, replayed after a switch to ngram (and
    reopened from the store), names tiny."""
    from helpers import SIZE, ask as ask_in_app, wait_until

    from specchat.app.chat_app import make_app
    from specchat.app.screens.replay_screen import ReplayScreen
    from specchat.app.screens.modals import ProfileScreen

    settings.max_tokens = 16
    for resume in (False, True):
        settings.resume = resume
        async with make_app(settings).run_test(size=SIZE) as pilot:
            app = pilot.app
            await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
            if not resume:
                await ask_in_app(pilot, PROMPT)
                await pilot.press("f2")
                await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen))
                for key in "ngram":
                    await pilot.press(key)
                await pilot.press("enter")
                await wait_until(pilot, lambda: app.busy is None and app.controller.profile.name == "ngram")
            await pilot.press("f9")
            await wait_until(pilot, lambda: isinstance(app.screen, ReplayScreen))
            side = " ".join(app.screen.query_one("Sidebar").plain.split())
            assert "tiny" in side and "ngram" not in side, side
            await pilot.press("escape")


def test_no_replay_without_chats_says_what_to_do():
    from helpers import cli

    result = cli("replay")
    assert result.returncode == 2 and "no chats yet" in result.stderr and result.stderr.count("\n") == 1


def test_candidate_probabilities_are_a_distribution(make_engine):
    engine = make_engine("none")
    for token in shown_tokens(engine.reply(PROMPT, max_tokens=8, top=50)):
        assert 0 < sum(c.p for c in token.judgement.top) <= 1 + 1e-6
        assert not math.isnan(token.judgement.top[0].p)


def test_a_stored_trace_survives_line_separators_and_an_empty_reply():
    """U+2028 and its kin stay inside their JSON line (splitlines() would have cut the trace there), and an empty
    reply's trace matches its empty segments."""
    from specchat.chats.session import turn_of
    from specchat.chats.store_rows import StoredMessage
    from specchat.chats.trace import packed, rows_of, unpacked

    rows = [{"type": "token", "text": "a\u2028b\u0085c", "token": 1, "kind": "target", "step": 0, "elapsed": 0.1}]
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    assert rows_of(unpacked(packed(lines))) == rows
    record = turn_of(StoredMessage("assistant", "a\u2028b\u0085c", [1], [("a\u2028b\u0085c", "target")], trace=lines))
    assert record.trace == rows
    empty = [{"type": "started", "prompt_tokens": 3, "reused_tokens": 0, "prefill_tokens": 3, "n_ctx": 64,
              "method": "none", "active": False}]
    record = turn_of(StoredMessage("assistant", "", [], None, trace=[json.dumps(r) for r in empty]))
    assert record.segments == [] and record.trace == empty and Replay.of(record.trace).steps == []
    with pytest.raises(ValueError, match="damaged"):
        Replay.of([{"type": "token", "text": "x"}])  # a row without its fields: refused, not a KeyError


def test_replay_shows_a_steps_rejected_tail_at_that_step_not_before(make_engine):
    engine = make_engine("draft", n_max=4)
    rows = [row_of(e) for e in engine.reply(PROMPT, max_tokens=40, top=5)]
    replay = Replay.of(rows)
    first = next(i for i, s in enumerate(replay.steps) if s.rejected is not None)
    assert replay.ghosts_until(first - 1) == {}  # nothing was rejected before that step
    assert replay.steps[first].rejected.text in replay.ghosts_until(first).values()
    from specchat.chats.records import ReplyRecord

    record = ReplyRecord()
    record.add(events_of(rows))
    assert replay.ghosts_until(len(replay.steps) - 1) == record.ghosts  # the whole reply: the record's own ghosts


def test_the_end_of_the_reply_is_a_named_candidate_not_an_empty_string(make_engine):
    """The inspector showed it as '' ("'.' 93.2% · '' 2.5%")."""
    engine = make_engine("draft", n_max=4)
    tokens = shown_tokens(engine.reply("Say hello.", max_tokens=24, top=5))
    candidates = [c for t in tokens for c in (*t.judgement.top, *t.judgement.draft_top)]
    ends = [c for c in candidates if engine.target.is_eog(c.token)]
    assert ends  # this reply's end was a candidate somewhere
    assert all(c.text == "<end>" for c in ends)
    assert all(c.text for c in candidates)  # no candidate shown as nothing
