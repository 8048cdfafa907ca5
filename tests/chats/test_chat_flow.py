"""The chat flow both front ends share (``chats.controller``), where it broke off the path the tests used to walk:
each test names the finding it was written for (issue "one chat flow, one conformance suite")."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers import HELD_LONG_STORY, LONG_STORY, THREADS, Run, endless_profile, noticed
from gguf_fixtures import write_variant
from specchat.backends import open_backend
from specchat.backends.run_config import BackendSettings, RunConfig
from specchat.chats.session import ChatSession
from specchat.chats.store import Store
from specchat.chats.store_rows import StoredMessage
from specchat.engine import EngineConfig, Message, ModelSettings, SpecConfig
from specchat.engine.events import SpeculationChanged, TokenEmitted
from specchat.engine.sampling import SamplingParams
from specchat.errors import SpecchatError
from specchat.telemetry.live import LiveTelemetry

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")
LONG = LONG_STORY  # the prompt HELD_LONG_STORY holds where a recorded test cuts it


def long_prompt(words: int = 500) -> str:
    return "Summarise this text in one sentence: " + " ".join(f"word{i % 97}" for i in range(words))


# -- 9. cancel reaches every long operation ------------------------------------------------------------------------


def test_a_prefill_stops_mid_batch_when_cancelled(make_engine):
    """Esc during the prefill of a long prompt waited for the whole prompt to decode (seconds on a CPU)."""
    engine = make_engine("draft", n_max=4)
    started = time.monotonic()
    run = Run(list(engine.reply(long_prompt(), max_tokens=20, should_stop=lambda: True)))
    assert run.finished.finish_reason == "cancelled" and not run.tokens
    assert run.finished.stats.prefill_tokens == 0 and len(engine.ctx.cached) < 600  # stopped inside the prompt
    assert time.monotonic() - started < 5
    engine.new_chat()
    again = Run(list(engine.reply("Hello!", max_tokens=8)))  # the engine goes on from a consistent cache
    assert again.finished.finish_reason in ("stop", "length", "loop") and again.tokens


def test_a_server_stream_stops_while_the_server_is_still_reading_the_prompt(target_path, draft_path, llama_server):
    """The stream waited (600 s at most) for the server's first chunk, after its whole prefill, before Esc counted."""
    backend = open_backend(RunConfig(ModelSettings(target_path, threads=THREADS),
                                     ModelSettings(draft_path, threads=THREADS),
                                        SpecConfig("draft", n_max=4), n_ctx=4096,
                                        backend=BackendSettings(kind="llama-server", binary=str(llama_server))))
    try:
        asked = time.monotonic()
        events = list(backend.answer([], long_prompt(600), max_tokens=20, should_stop=lambda: True))
        waited = time.monotonic() - asked
        assert events[-1].finish_reason == "cancelled" and len([e for e in events if isinstance(e, TokenEmitted)]) <= 1
        assert waited < 2.0, waited  # the server's prefill of 1,800 tokens takes seconds on a CPU
        assert list(backend.answer([], "Hello!", max_tokens=8))[-1].stats.generated > 0
    finally:
        backend.close()


# -- 10. the badge follows drafting that stops mid-reply -----------------------------------------------------------


# Prompts whose greedy replies, on the machines tried, bring one of the vocabulary's last 128 tokens (" Fountain")
# mid-reply; greedy text moves with the processor, so the test takes the first that does here.
FOUNTAIN_PROMPTS = ("Name a famous fountain in Rome.", "What is the most famous fountain in Rome called?",
                    "Which fountain in Rome do tourists throw coins into?")


def test_drafting_blocked_mid_reply_switches_the_badge_then(target_path, tmp_path):
    """The draft lacks the target's last 128 tokens and one of them comes mid-reply. The badge stayed ACTIVE."""
    draft = write_variant(target_path, tmp_path / "smaller.gguf", drop_tokens=128)
    from specchat.engine.core import Engine

    def reply(prompt: str, draft_model: ModelSettings | None) -> Run:
        engine = Engine(EngineConfig(ModelSettings(target_path, threads=THREADS), draft_model,
                                     SpecConfig("draft" if draft_model else "none", n_max=4), n_ctx=1024,
                                     system_prompt="You are a helpful assistant."))
        try:
            return Run(list(engine.reply(prompt, max_tokens=40)))
        finally:
            engine.close()

    unreadable = 49152 - 128  # SmolLM2's vocabulary, less what the draft lacks
    for prompt in FOUNTAIN_PROMPTS:
        plain = reply(prompt, None).ids
        late = [i for i, t in enumerate(plain) if t >= unreadable]
        if late and 0 < late[0] < len(plain) - 5:
            break
    else:
        pytest.fail("no prompt brings one of the last 128 tokens mid-reply on this machine")
    blocked = plain[late[0]]
    run = reply(prompt, ModelSettings(draft, threads=THREADS))
    ids = run.ids
    assert ids == plain  # the draft's failure to read a token changes nothing of the reply
    changed = [i for i, e in enumerate(run.events) if isinstance(e, SpeculationChanged)]
    assert changed, "no SpeculationChanged when drafting stopped"
    state = run.events[changed[0]].speculation
    assert not state.active and f"cannot read token {blocked}" in state.reason
    from specchat.engine.events import StepVerified

    step_ends = [i for i, e in enumerate(run.events[:changed[0]]) if isinstance(e, StepVerified)]
    last_step = run.events[step_ends[-1] + 1:changed[0]]  # the step's events come before its StepVerified
    assert any(isinstance(e, TokenEmitted) and e.token == blocked for e in last_step)  # right after the step that brought it
    live = LiveTelemetry()
    live.consume(run.events[:changed[0] + 1])
    assert live.generating and not live.speculation.active  # the badge changed while the reply streams


# -- 11. a damaged token column ------------------------------------------------------------------------------------


def test_a_damaged_tokens_column_retokenizes_the_reply_instead_of_dropping_it(tmp_path, make_engine, target_path):
    db = tmp_path / "chats.sqlite3"
    store = Store(db)
    chat = store.create("t", "tiny", None)
    store.replace_tail(chat, 0, [StoredMessage("user", "Name two planets."),
                                 StoredMessage("assistant", "Mars and Venus.", [1, 2, 3, 4],
                                               [("Mars", "target"), (" and", "target"), (" Venus", "target"),
                                                (".", "target")], target_id="x")])
    store.db.execute("UPDATE messages SET tokens = '[1, 2, \"damaged' WHERE role = 'assistant'")
    from specchat.engine.llama import model_identity

    store.db.execute("UPDATE messages SET target_id = ?", (model_identity(target_path),))
    session = ChatSession(store, "tiny", None, lambda *_: None)
    session.open(chat)
    messages = session.engine_messages(model_identity(target_path))
    assert messages[-1].content == "Mars and Venus." and messages[-1].tokens is None
    engine = make_engine("none", system_prompt=None)
    engine.restore(messages)
    text = engine.target.detokenize(engine.tokens)
    assert "Mars and Venus." in text  # the reply is in the prompt, tokenized from its text
    # Ids that do not match the text they came with (a count that differs) are no ids of it either.
    store.db.execute("UPDATE messages SET tokens = '[1, 2]' WHERE role = 'assistant'")
    session.open(chat)
    assert session.engine_messages(model_identity(target_path))[-1].tokens is None
    store.close()


# -- 12. a rate over no measurable interval ------------------------------------------------------------------------


def test_a_reply_cancelled_after_its_first_step_has_no_rate_and_no_speedup(make_engine):
    """Five tokens, all from one verify, showed "tok/s reply 0" and "vs plain 0.02×"."""
    engine = make_engine("draft", n_max=4)
    steps = []
    run = Run(list(_until_first_step(engine, steps)))
    assert run.finished.finish_reason == "cancelled" and len(steps) == 1 and len(run.tokens) >= 2
    assert run.finished.stats.decode_tps is None
    live = LiveTelemetry()
    from specchat.engine.reference import PlainReference

    live.reference = PlainReference.measured(100.0, 0, 0.0, False, "test")
    live.consume(run.events)
    assert live.reply_rate() is None and live.speedup() is None
    from specchat.repl.render import figures

    line = figures(live, "tiny", "draft", "RSS –")
    assert "– tok/s" in line and "vs plain –" in line


def _until_first_step(engine, steps):
    from specchat.engine.events import StepVerified

    def stop() -> bool:
        return bool(steps)

    for event in engine.reply("List three fruits.", max_tokens=40, should_stop=stop):
        if isinstance(event, StepVerified):
            steps.append(event)
        yield event


# -- 13. the REPL's summary and status line ------------------------------------------------------------------------


def test_the_summary_of_an_auto_profile_says_auto_and_the_status_line_fits(tmp_path, user_cache):
    from specchat.engine.stats import ReplyStats
    from specchat.figures import summary_line
    from specchat.repl.render import figures

    stats = ReplyStats(method="ngram", speculation_active=True, draft_length=0, adaptive=True, generated=10)
    assert summary_line(stats, "stop").startswith("[ngram n_max=auto]")
    live = LiveTelemetry()
    full = figures(live, "a-long-profile-name", "ngram", "RSS 350 MB")
    assert "ctx" in full and "RSS" in full
    for width in (30, 50, 70, 90):
        line = figures(live, "a-long-profile-name", "ngram", "RSS 350 MB", width)
        assert len(line) <= width
        fields = [f.strip() for f in line.strip().split(" · ")]
        assert all(f in full for f in fields)  # whole fields only, none cut at the edge
    assert "–" in figures(live, "p", "ngram", "RSS 1 MB", 30)  # the state, the most useful field, stays


# -- 6. A/B in a trimmed chat keeps the window -------------------------------------------------------------------


def test_ab_in_a_trimmed_chat_keeps_the_window(target_path, draft_path):
    """After A/B in a trimmed chat the next turn trimmed the whole chat afresh and decoded its prompt anew (when the
    plain arm's reply differed from the reply, as sampled ones do): it must go on as it would have without the A/B."""
    from specchat.backends.local import LocalBackend

    def last_turn(with_ab: bool):
        backend = LocalBackend(RunConfig(ModelSettings(target_path, threads=THREADS),
                                         ModelSettings(draft_path, threads=THREADS), SpecConfig("draft", n_max=4),
                                         SamplingParams(temperature=0.8, seed=5), n_ctx=256,
                                         system_prompt="Be brief."))
        try:
            history, trimmed = [Message("system", "Be brief.")], False
            for text in ("Tell me about the sea.", "And about mountains?", "What about rivers?", "And deserts?"):
                events = list(backend.answer(history, text, max_tokens=48))
                trimmed = trimmed or any(type(e).__name__ == "ContextTrimmed" for e in events)
                history += [Message("user", text),
                            Message("assistant", events[-1].text, backend.engine.messages[-1].tokens)]
            assert trimmed
            if with_ab:
                backend.rerun_plain(history[:-2], history[-2].content, 0, 48)
            events = list(backend.answer(history, "And forests?", max_tokens=48))
            started = next(e for e in events if type(e).__name__ == "ReplyStarted")
            trims = [e for e in events if type(e).__name__ == "ContextTrimmed"]
            return started.prompt_tokens, started.prefill_tokens, len(trims), len(history[-1].tokens or [])
        finally:
            backend.close()

    (prompt, prefill, trims, reply), (prompt_0, prefill_0, trims_0, _) = last_turn(True), last_turn(False)
    assert (prompt, trims) == (prompt_0, trims_0) == (prompt, 0)  # the same window, not trimmed afresh
    # The plain arm's reply took the last reply's place in the cache: that reply is decoded again, nothing more.
    assert prefill <= prefill_0 + reply + 1, (prefill, prefill_0, reply)


# -- 8. a server restart stops the old server first ----------------------------------------------------------------


def test_a_server_restart_never_runs_two_servers_and_ab_shows_the_servers_memory(target_path, draft_path,
                                                                                 llama_server):
    from backend_kinds import llama_servers_running

    config = RunConfig(ModelSettings(target_path, threads=THREADS), ModelSettings(draft_path, threads=THREADS),
                       SpecConfig("draft", n_max=4), n_ctx=1024,
                    backend=BackendSettings(kind="llama-server", spec_type="draft-simple",
                                            binary=str(llama_server)))
    before = llama_servers_running()
    backend = open_backend(config)
    most = [0]
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            most[0] = max(most[0], len(llama_servers_running() - before))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        import dataclasses

        assert backend.apply(dataclasses.replace(config, spec=SpecConfig("draft", n_max=2))) == "server restarted"
        plain, tokens = backend.rerun_plain([], "Name two planets.", 0, 16)  # two restarts more
        watching.set()
        watcher.join()
        assert most[0] == 1, most[0]
        # A/B's memory column is the server's peak (its model), not this process's.
        assert tokens and plain["peak_rss"] and plain["peak_rss"] > target_path.stat().st_size
    finally:
        watching.set()
        backend.close()


# -- 4. A/B compares like with like --------------------------------------------------------------------------------


@pytest.mark.recorded(holds=HELD_LONG_STORY)
def test_ab_in_the_repl_refuses_a_cancelled_reply_and_one_made_under_another_profile(tmp_path, user_cache):
    from specchat.repl.shell import ReplSettings
    from helpers import signal_once_streaming
    from helpers import CTRL_D, run_repl

    sampled = tmp_path / "sampled.toml"
    sampled.write_text((Path(__file__).parents[2] / "profiles" / "tiny.toml").read_text()
                       .replace("temperature = 0.0", "temperature = 0.8"))
    settings = ReplSettings("tiny", db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history",
                            max_tokens=300, color=False)
    keys = f"{LONG}\r/ab\rName a colour.\r/profile {sampled}\r/ab\r" + CTRL_D
    _, _, text = run_repl(settings, keys, during=signal_once_streaming(signal.SIGINT))
    assert "replies identical" not in text, text
    assert "this one was cancelled" in text
    assert "the profile changed the sampling since this reply" in text


@pytest.mark.recorded
def test_ab_refuses_a_reply_made_under_another_target_or_context(tmp_path, user_cache):
    """After a switch that changed the target or the context, both arms reran under the new profile against a record
    made under the old one; each change is named, and a regenerated reply can be compared again."""
    from backend_kinds import ask, controller_for
    from specchat.chats.controller import Refused

    tiny = (Path(__file__).parents[2] / "profiles" / "tiny.toml").read_text()
    profiles = {"tiny": tmp_path / "tiny.toml", "context": tmp_path / "context.toml", "target": tmp_path / "target.toml"}
    profiles["tiny"].write_text(tiny)
    profiles["context"].write_text(tiny.replace("n_ctx = 4096", "n_ctx = 2048"))
    profiles["target"].write_text(tiny.replace('model = "embedded:target"', 'model = "embedded:draft"', 1))
    profiles["template"] = tmp_path / "template.toml"
    profiles["template"].write_text(tiny.replace("[chat]\n", '[chat]\ntemplate = "chatml"\n', 1))
    controller = controller_for(profiles["tiny"], max_tokens=16)
    try:
        ask(controller, "Name a colour.")
        for name, change in (("context", "the context size"), ("target", "the target model"),
                             ("template", "the chat template")):
            controller.switcher.profile_switched(controller.switcher.switch_profile(str(profiles[name])))
            with pytest.raises(Refused, match=f"the profile changed {change} since this reply"):
                controller.compare()
            controller.switcher.profile_switched(controller.switcher.switch_profile(str(profiles["tiny"])))
        # The plain arm would run under today's system prompt (the REPL's /system, the app's system prompt screen).
        system = controller.session.system_prompt
        controller.set_system_prompt("You are a pirate. Answer in pirate speak.")
        with pytest.raises(Refused, match="the system prompt changed since this reply"):
            controller.compare()
        controller.set_system_prompt(system or "")
        result = controller.compare().run()  # back under the reply's own conditions: compared, and alike
        assert result is not None and result.identical is True
        # A reply stored before its conditions were kept (an older specchat) cannot be vouched for.
        record = controller.session.last_reply
        for old in (None, {k: v for k, v in record.conditions.items() if k not in ("system_prompt", "chat_template")}):
            record.conditions = old
            with pytest.raises(Refused, match="stored before specchat kept what an A/B must share"):
                controller.compare()
    finally:
        controller.close()


async def test_ab_in_the_app_refuses_a_cancelled_reply_and_esc_stops_a_running_one(settings):
    from specchat.app.chat_app import make_app
    from specchat.chats.replies import Activity
    from specchat.app.screens.modals import ABScreen
    from helpers import SIZE, ask, ready, start_long_reply, wait_until

    settings.max_tokens = 128
    settings.profile = endless_profile()
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await start_long_reply(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.busy is None)
        await pilot.press("ctrl+b")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ABScreen) and app.busy is None
        await noticed(pilot, "this one was cancelled")
        reply = await ask(pilot, LONG)
        assert reply.finish_reason == "length"  # 128 tokens (loops not stopped): its plain rerun takes a second
        await pilot.press("ctrl+b")
        await wait_until(pilot, lambda: app.busy is Activity.COMPARING)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.busy is None)
        assert not isinstance(app.screen, ABScreen)
        await noticed(pilot, "A/B cancelled")
        assert app.backend.speculation_state().active  # the profile is back as it was


def test_ctrl_c_during_ab_or_a_profile_switch_does_not_end_the_repl(tmp_path, user_cache):
    from specchat.repl.shell import ReplSettings
    from helpers import CTRL_D, run_repl

    settings = ReplSettings("tiny", db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history",
                            max_tokens=160, color=False)  # the A/B's plain rerun of 160 tokens outlasts the 0.2 s below
    interrupted = []

    def interrupt_the_ab(repl) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if "A/B: the last prompt again" in repl.text_out.getvalue():
                time.sleep(0.2)
                os.kill(os.getpid(), signal.SIGINT)
                interrupted.append(True)
                return
            time.sleep(0.05)

    keys = f"{LONG}\r/ab\rSay yes.\r" + CTRL_D
    repl, _, text = run_repl(settings, keys, during=interrupt_the_ab)
    assert interrupted and "A/B cancelled" in text
    assert repl.session.last_reply is not None and len(repl.session.turns) == 4  # "Say yes." was answered after it

    def interrupt_the_switch(repl) -> None:
        """Ctrl+C while the engine thread loads the profile /profile asked for (the real switch runs on)."""
        switch = repl.controller.switcher.switch

        def switching(choice):
            if choice.profile == "ngram":
                os.kill(os.getpid(), signal.SIGINT)
                interrupted.append(choice.profile)
                time.sleep(0.3)  # the signal reaches the REPL's thread while the switch is still running
            return switch(choice)
        repl.controller.switcher.switch = switching

    settings.db_path = tmp_path / "second.sqlite3"
    repl, _, text = run_repl(settings, "/profile ngram\r", "Say yes.\r", CTRL_D, during=interrupt_the_switch)
    assert "ngram" in interrupted and "(Ctrl+C: a profile loads to its end" in text
    assert repl.profile.name == "ngram" and len(repl.session.turns) == 2  # switched, then "Say yes." was answered


@pytest.mark.recorded
def test_a_message_refused_before_it_began_comes_back_to_the_repls_prompt(tmp_path, user_cache):
    """The app put a message too long for the context back into its prompt; the REPL dropped it."""
    from specchat.repl.shell import ReplSettings
    from helpers import CTRL_D, run_repl

    small = tmp_path / "small.toml"
    small.write_text((Path(__file__).parents[2] / "profiles" / "tiny.toml").read_text()
                     .replace("n_ctx = 4096", "n_ctx = 128"))
    settings = ReplSettings(str(small), db_path=tmp_path / "chats.sqlite3", max_tokens=16, color=False)
    # Sent, refused, back in the prompt; Enter sends it again (refused again); Ctrl+C clears it; Ctrl+D quits.
    repl, _, text = run_repl(settings, long_prompt(200) + "\r", "\r", "\x03", CTRL_D)
    assert text.count("context holds 128") == 2, text
    assert not repl.session.turns and repl.unsent == ""


# -- 3 and 8. a failed switch: what the screen names is what runs -------------------------------------------------


def test_a_server_that_fails_to_restart_gives_way_to_the_old_one_and_the_facts_follow(tmp_path, user_cache,
                                                                                    llama_server, servers):
    """The old server was started again on another pid and port, but the sidebar's backend line and the memory
    sampled kept the dead one's (the error was not a SwitchFailed, so the controller never read the facts again)."""
    from backend_kinds import alive, controller_for, llama_servers_running, write_profile

    good = write_profile(tmp_path, "managed", binary=llama_server, servers=servers)
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("n_max = 4", "n_max = 3")
                   .replace('spec_type = "draft-simple"', 'spec_type = "draft-simple"\nargs = ["--no-such-flag"]'))
    before = llama_servers_running()
    controller = controller_for(good, max_tokens=8)
    try:
        old_pid = controller.backend.pid
        with pytest.raises(SpecchatError, match="the previous server was started again"):
            controller.switcher.switch_profile(str(bad))
        backend, facts = controller.backend, controller.facts
        assert backend is not None and backend.pid != old_pid and not alive(old_pid) and alive(backend.pid)
        assert facts.pid == backend.pid and facts.where == backend.where  # the screen names the server that runs
        assert llama_servers_running() - before - servers.pids() == {backend.pid}
        exchange = controller.begin("Say hi.")
        assert exchange.run(lambda _e: None) is None  # and it answers
    finally:
        controller.close()
    assert not (llama_servers_running() - before - servers.pids())


# -- 5. "vs plain" like for like ----------------------------------------------------------------------------------


def test_vs_plain_is_plain_decoding_at_the_replys_depth_with_its_sampling(make_engine):
    """The reference was a 32-token greedy run at an empty cache while the reply decoded hundreds of tokens deep (the
    seeds' control prompt: 0.35× on screen, 0.63× measured), and a sampled reply paid for sampling alone (method none
    at T = 0.8 read 0.92× of itself). benchmarks/plain_reference.py measures how close the model comes."""
    sampled = make_engine("none", sampling=SamplingParams(temperature=0.8, seed=3))
    measured = sampled.plain_reference()
    assert measured is not None and measured.sampled and measured.per_token_s is not None
    # Here: how "vs plain" reads a reference. One taken beside busy cores is compared with nothing (test_server.py,
    # test_quiet_costs.py), so on a busy machine this one is read as if it had been quiet.
    reference = dataclasses.replace(measured, busy=None)
    assert reference.tps_at(1000) <= reference.tps_at(0)  # plain decoding slows (or holds) with depth
    run = Run(list(sampled.reply(long_prompt(250), max_tokens=24)))
    live = LiveTelemetry()
    live.reference = reference
    live.consume(run.events[:-1])  # what the sidebar shows while the reply streams
    depth = run.started.prompt_tokens + len(run.tokens) / 2
    assert live.depth == depth and live.plain_tps == reference.tps_at(depth)
    assert f"{depth:.0f} tokens deep, sampled" in live.plain_source
    # At its end the reply's own undrafted steps become the reference where they disagree with it beyond the noise
    # (a machine busier or quieter than when it was measured: seen in a full run), else it stays.
    live.consume(run.events[-1:])
    assert live.reference is reference or "undrafted steps" in live.plain_source
    greedy = make_engine("none").plain_reference()
    assert not greedy.sampled and "greedy" in greedy.describe(100)
