"""Quick toggles (issue "steer and inspect speculation with one key"): speculation off and on by hand, back to the
previous profile, the draft length one token longer or shorter — through the chat controller on the in-process and
the llama-server backends, in the app (Pilot) and in the REPL. Greedy replies stay plain decoding's whatever is
toggled; in-process, a toggle reloads nothing and the target's cache is kept."""

from __future__ import annotations

import re

import pytest

from backend_kinds import N_MAX, TURNS, ask, controller_for, write_profile
from specchat.chats.controller import Refused
from specchat.engine.engine_config import SWITCHED_OFF_BY_HAND
from helpers import noticed

pytestmark = pytest.mark.usefixtures("isolated_user_dirs", "user_cache")
KINDS = ("in-process", "managed")
TOOK = {"in-process": "nothing reloaded, the target's cache kept",
        "managed": "the server restarted (its cache starts empty)"}


def same(record, expected) -> None:
    ids, text = expected
    assert (record.tokens, record.text) == (ids, text)


def cache_kept(record) -> bool:
    """The reply decoded only the new message: what the target had cached was still there."""
    return record.stats["prefill_tokens"] < record.stats["prompt_tokens"] // 2


@pytest.mark.parametrize("kind", KINDS)
def test_speculation_off_and_on_by_hand_then_a_longer_draft_then_back(kind, tmp_path, llama_server, servers, plain):
    controller = controller_for(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    expected = plain.chat(TURNS + ("Thanks!",))
    try:
        same(ask(controller, TURNS[0]), expected[0])
        before = controller.choice

        switched = controller.switcher.switch(controller.switcher.speculation_toggled())
        controller.switcher.profile_switched(switched)
        assert switched.announcement(before) == f"speculation off, by hand: {TOOK[kind]}"
        state = controller.facts.speculation
        assert not state.active and state.reason == SWITCHED_OFF_BY_HAND
        assert controller.telemetry.chat.drafted > 0  # a toggle keeps the chat's counters (a profile switch resets)
        off = ask(controller, TURNS[1])
        same(off, expected[1])
        assert off.stats["drafted"] == 0 and off.stats["method"] == "none"
        assert cache_kept(off) == (kind == "in-process")

        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.speculation_toggled()))
        assert controller.facts.speculation.active
        on = ask(controller, TURNS[2])
        same(on, expected[2])
        assert on.stats["drafted"] > 0 and cache_kept(on) == (kind == "in-process")

        before = controller.choice
        switched = controller.switcher.switch(controller.switcher.draft_cap(1))
        controller.switcher.profile_switched(switched)
        assert switched.announcement(before) == f"draft length 5: {TOOK[kind]}"
        assert controller.facts.draft_length == 5 and controller.backend.config.spec.n_max == 5
        longer = ask(controller, "Thanks!")
        same(longer, expected[3])
        assert longer.stats["draft_length"] == 5

        with pytest.raises(Refused, match="no earlier profile"):
            controller.switcher.previous_profile()
    finally:
        controller.close()


@pytest.mark.recorded
def test_previous_profile_goes_back_with_its_toggles():
    from pathlib import Path

    controller = controller_for(Path(__file__).parents[2] / "profiles" / "tiny.toml")
    try:
        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.draft_cap(-1)))  # tiny, 3 tokens a step
        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.speculation_toggled()))  # and off by hand
        controller.switcher.profile_switched(controller.switcher.switch_profile("ngram"))
        assert controller.facts.method == "ngram" and controller.facts.adaptive
        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.previous_profile()))
        assert controller.profile.name == "tiny" and controller.choice.n_max == 3 and controller.choice.speculation_off
        assert not controller.facts.speculation.active and controller.facts.speculation.reason == SWITCHED_OFF_BY_HAND
        # and F4 again: back to ngram, as `cd -` does. F5/F6 step the cap the profile sets, not the length "auto"
        # chose last (0 here, having drafted nothing yet: F6 once fixed the length at 1, F5 too — issue #49); from
        # "auto" there is no cap to step, so either fixes the profiles' default, 4
        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.previous_profile()))
        assert controller.profile.name == "ngram" and controller.backend.draft_length == 0
        assert controller.switcher.draft_cap(1).n_max == 4 and controller.switcher.draft_cap(-1).n_max == 4
    finally:
        controller.close()


def test_what_cannot_be_toggled_says_why_in_one_line(tmp_path, llama_server, servers):
    from pathlib import Path

    profiles = Path(__file__).parents[2] / "profiles"
    controller = controller_for(profiles / "baseline.toml")
    try:
        with pytest.raises(Refused, match="does not speculate"):
            controller.switcher.speculation_toggled()
        with pytest.raises(Refused, match="this profile does not speculate"):
            controller.switcher.draft_cap(1)
    finally:
        controller.close()
    controller = controller_for(profiles / "tiny.toml")
    try:
        with pytest.raises(Refused, match="the draft length is 4 already"):
            controller.switcher.draft_cap_set(4)
        with pytest.raises(Refused, match="a draft length is 1 to 256 tokens, not 300"):
            controller.switcher.draft_cap_set(300)
        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.draft_cap_set(1)))
        with pytest.raises(Refused, match="the draft length is 1 already"):
            controller.switcher.draft_cap(-1)
        # A reply decoded with speculation off by hand: A/B would compare plain decoding with itself.
        controller.switcher.profile_switched(controller.switcher.switch(controller.switcher.speculation_toggled()))
        ask(controller, "Name a colour.")
        with pytest.raises(Refused, match="decoded without speculation"):
            controller.compare()
        with pytest.raises(Refused, match="switched off by hand"):
            controller.switcher.draft_cap(1)
    finally:
        controller.close()
    # A llama-server specchat starts drafts its own default length under "auto" (3): that is the cap F5/F6 step from
    # there, as from a number — F5 once fixed 4 there, a longer draft for "one token less" (issue #49's review).
    managed = write_profile(tmp_path, "managed", binary=llama_server, servers=servers)
    managed.write_text(managed.read_text().replace(f"n_max = {N_MAX}", 'n_max = "auto"'))
    controller = controller_for(managed)
    try:
        assert controller.backend.draft_length == 3
        assert controller.switcher.draft_cap(-1).n_max == 2 and controller.switcher.draft_cap(1).n_max == 4
    finally:
        controller.close()
    controller = controller_for(write_profile(tmp_path, "remote-llama", binary=llama_server, servers=servers))
    try:
        with pytest.raises(Refused, match="cannot be switched off from here"):
            controller.switcher.speculation_toggled()  # it would only reconnect, and the server would go on drafting
        with pytest.raises(Refused, match="a remote server drafts the length it was started with"):
            controller.switcher.draft_cap(1)
    finally:
        controller.close()


@pytest.mark.recorded
@pytest.mark.parametrize("kind", KINDS)
async def test_the_keys_in_the_app(kind, tmp_path, settings, llama_server, servers):
    from helpers import SIZE, ask as ask_in_app, wait_until

    from specchat.app.chat_app import make_app

    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 24
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)

        def shown() -> str:
            return " ".join(app.chat_view.sidebar.plain.split())

        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: app.busy is None and " INACTIVE " in f" {shown()} ")
        assert "switched off by hand" in shown()
        await noticed(pilot, f"speculation off, by hand: {TOOK[kind]}")
        await ask_in_app(pilot, "Say hi.")
        assert app.session.last_reply.stats["drafted"] == 0

        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: app.busy is None and " ACTIVE " in f" {shown()} ")
        await pilot.press("f6")
        await wait_until(pilot, lambda: app.busy is None and "draft length 5" in shown())
        await ask_in_app(pilot, "Say hello.")
        reply = app.session.last_reply
        assert reply.stats["drafted"] > 0 and reply.stats["draft_length"] == 5
        await pilot.press("f5")
        await wait_until(pilot, lambda: app.busy is None and "draft length 4" in shown())

        await pilot.press("f4")
        await noticed(pilot, "no earlier profile")
        assert app.busy is None


@pytest.mark.recorded
@pytest.mark.parametrize("kind", KINDS)
def test_the_commands_in_the_repl(kind, tmp_path, llama_server, servers):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    settings = ReplSettings(str(profile), db_path=tmp_path / "chats.sqlite3", max_tokens=24, color=False)
    keys = ["/spec off\r", "Say hi.\r", "/spec on\r", "/draft +\r", "Say hello.\r", "/draft auto\r",
            "/profile ngram\r", "/profile -\r", CTRL_D]
    repl, _, text = run_repl(settings, *keys, pace=0.1)
    assert f"speculation off, by hand: {TOOK[kind]}" in text and "speculation off: " + SWITCHED_OFF_BY_HAND in text
    assert f"speculation on again: {TOOK[kind]}" in text and f"draft length 5: {TOOK[kind]}" in text
    assert "draft length auto: " in text and "profile ngram: " in text
    replies = repl.session.turns[1::2]
    assert replies[0].stats["drafted"] == 0 and replies[1].stats["drafted"] > 0 and replies[1].stats["draft_length"] == 5
    assert repl.profile.name == profile.stem and repl.controller.choice.n_max == "auto"  # /profile - came back
    assert "specchat:" not in text, text


@pytest.mark.recorded
def test_spec_on_for_a_profile_that_does_not_speculate_says_so(tmp_path):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    settings = ReplSettings("baseline", max_tokens=8, color=False)
    _, _, text = run_repl(settings, "/spec on\r", "/spec off\r", "/draft +\r", CTRL_D)
    assert text.count("specchat: profile baseline does not speculate (method none)") == 2, text
    assert "specchat: no draft length to change: this profile does not speculate" in text


def test_favourites_are_read_from_the_settings_file_and_bad_ones_say_why(tmp_path):
    from specchat.errors import ConfigError
    from specchat.profiles.favourites import favourite, load_favourites

    path = tmp_path / "settings.toml"
    assert load_favourites(path) == ["suffix-draft", "tiny"]  # until the file lists its own: the default, a draft model
    path.write_text("")
    assert load_favourites(path) == ["suffix-draft", "tiny"] and favourite(path, 2) == "tiny"
    path.write_text('[favourites]\nprofiles = []\n')
    with pytest.raises(ConfigError, match=r"no favourite 1: it names none"):
        favourite(path, 1)
    path.write_text('[favourites]\nprofiles = ["ngram", " tiny "]\n')
    assert load_favourites(path) == ["ngram", "tiny"] and favourite(path, 2) == "tiny"
    with pytest.raises(ConfigError, match=r"no favourite 3: it names 2 — list up to 9 profiles"):
        favourite(path, 3)
    for text, problem in (("[favourites\n", "cannot read the settings"), ('[favourites]\nprofiles = "ngram"\n',
                          "must be a list of profile names"), (f"[favourites]\nprofiles = {['tiny'] * 10}\n".replace(
                          "'", '"'), "names 10 profiles, and there are keys for 9")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=problem):
            load_favourites(path)


@pytest.mark.recorded
async def test_favourite_keys_in_the_app(tmp_path, settings):
    from helpers import SIZE, wait_until

    from specchat.app.chat_app import make_app

    settings.settings_file = tmp_path / "settings.toml"
    settings.settings_file.write_text('[favourites]\nprofiles = ["ngram", "tiny"]\n')
    settings.profile = "tiny"
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)
        await pilot.press("alt+1")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")
        assert app.controller.facts.method == "ngram"
        await pilot.press("alt+3")
        await pilot.pause(0.2)
        await noticed(pilot, "no favourite 3: it names 2")
        await pilot.press("alt+2")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "tiny")


@pytest.mark.recorded
def test_favourites_in_the_repl(tmp_path):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    favourites = tmp_path / "settings.toml"
    favourites.write_text('[favourites]\nprofiles = ["ngram"]\n')
    settings = ReplSettings("tiny", max_tokens=8, color=False, settings_file=favourites)
    repl, _, text = run_repl(settings, "/fav\r", "/fav 1\r", "/fav 2\r", CTRL_D)
    assert "  1  ngram" in text and "profile ngram: " in text and repl.profile.name == "ngram"
    assert "specchat: no favourite 2: it names 1" in text


@pytest.mark.recorded
async def test_the_profile_picker_filters_as_you_type_and_marks_models_not_here(settings):
    from helpers import SIZE, ready, wait_until

    from specchat.app.chat_app import make_app
    from specchat.app.screens.modals import ProfileScreen

    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen) and app.screen.absent is not None)
        listing = app.screen.query_one("#profile-list")
        options = {listing.get_option_at_index(i).id: listing.get_option_at_index(i) for i in range(listing.option_count)}
        qwen = options["profile:qwen3-8b-1.7b"]
        assert qwen.disabled and "not on this machine: Qwen3-8B-Q4_K_M.gguf" in str(qwen.prompt)  # before Enter
        assert not options["profile:ngram"].disabled and "in-process" in str(options["profile:ngram"].prompt)
        assert "llama-server" in str(options["profile:server-tiny"].prompt)
        await pilot.press(*"ngram lookup in-pro")  # every word must match: server-ngram-simple runs in llama-server,
        # ngram-draft copies without "prompt lookup"
        await wait_until(pilot, lambda: listing.option_count == 1)
        assert listing.get_option_at_index(0).id == "profile:ngram"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")


# -- a first screen that says what to do ---------------------------------------------------------------------------


def test_the_advice_when_speculation_is_slower():
    """The reason is read from what the screen shows; each rule once, on given figures."""
    from specchat.chats.advice import advice
    from specchat.profiles import load_profile

    tiny, ngram = load_profile("tiny"), load_profile("ngram")
    sizes = {"target": 100_000_000, "draft": 60_000_000}
    assert advice(None, True, 0.5, tiny, sizes) is None  # nothing measured: nothing to say
    assert advice(1.2, True, 0.5, tiny, sizes) is None  # faster than plain
    assert advice(0.5, False, None, tiny, sizes) is None  # slower, but not speculating
    same_size = advice(0.5, True, 0.9, tiny, sizes)
    assert same_size.why == "the draft (60 MB) costs about as much to run as the target (100 MB) saves"
    assert (same_size.suggestion, same_size.does) == ("ngram", "drafts from the chat itself, no second model")
    rejected = advice(0.5, True, 0.3, tiny, {"target": 100_000_000, "draft": 10_000_000})
    assert rejected.why == "only 30% of the drafted tokens are accepted"
    costly = advice(0.9, True, 0.8, ngram, {"target": 100_000_000})
    assert costly.why == "a verify step costs more here than its accepted drafts save"
    assert (costly.suggestion, costly.does) == (None, "plain decoding of the same target")  # speculation off
    assert advice(0.9, True, None, ngram, {}).why.startswith("no draft was judged in this reply")
    assert advice(0.98, True, 0.9, tiny, sizes) is None  # within the noise of one measurement
    # Another target than ngram's: suggesting ngram would swap the model too, so speculation off is suggested.
    qwen = advice(0.5, True, 0.6, load_profile("qwen3-8b-1.7b"), {"target": 5_000_000_000, "draft": 1_100_000_000})
    assert qwen.suggestion is None and qwen.why.startswith("a verify step costs more")
    # The default profile loads a draft model that "auto" keeps off here: when only copies drafted, the draft's size
    # is not the reason, and ngram (what ran, less the stored chats) is not the remedy.
    copies_only = advice(0.5, True, 0.6, load_profile("suffix-draft"), sizes, guessed=False)
    assert copies_only.why.startswith("a verify step costs more") and copies_only.suggestion is None
    assert advice(0.5, True, 0.6, load_profile("suffix-draft"), sizes).why.startswith("the draft (60 MB) costs")


def test_the_advice_reads_the_profiles_once_per_profile_not_at_every_sidebar_refresh(monkeypatch):
    """The sidebar asks for the advice at every frame of a reply (5 a second, on the UI thread), and listing and
    parsing the profiles each time took 33 ms of it."""
    from specchat.chats import advice as advising
    from specchat.profiles import load_profile

    tiny, sizes = load_profile("tiny"), {"target": 100_000_000, "draft": 60_000_000}
    read: list[str] = []
    listed = advising.available_profiles
    monkeypatch.setattr(advising, "available_profiles", lambda: read.append("list") or listed())
    monkeypatch.setattr(advising, "load_profile", lambda name: read.append(name) or load_profile(name))
    for _ in range(5):
        assert advising.advice(0.5, True, 0.9, tiny, sizes).suggestion == "ngram"
    assert read == ["list", "ngram"]
    assert advising.advice(0.5, True, 0.9, load_profile("tiny"), sizes).suggestion == "ngram"  # switched: read again
    assert read == ["list", "ngram"] * 2


@pytest.mark.recorded
async def test_the_app_says_why_speculation_loses_and_one_key_switches(settings):
    from helpers import SIZE, ask as ask_in_app, ready, wait_until

    from specchat.app.chat_app import make_app

    settings.max_tokens = 48
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        await ask_in_app(pilot, "Write two sentences about the sea.")
        shown = " ".join(app.chat_view.sidebar.plain.split())
        assert app.telemetry.speedup() is not None
        if app.telemetry.speedup() >= 0.97:  # the same-size pair kept up on this machine: nothing is to be advised
            assert "costs about as much" not in shown
            return
        assert "⚠ slower than plain" in shown and "costs about as much to run as the target" in shown
        assert "f7: ngram (drafts from the chat itself, no second model)" in shown
        await pilot.press("f7")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "ngram")


@pytest.mark.recorded
def test_the_repl_says_why_once_a_profile(tmp_path):
    from helpers import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    settings = ReplSettings("tiny", max_tokens=48, color=False)
    repl, _, text = run_repl(settings, "Write two sentences about the sea.\r", "Two more, please.\r", CTRL_D)
    if "slower than plain: " not in text:  # the same-size pair kept up on this machine: nothing to advise
        assert all(reply.stats["decode_tps"] >= 0.97 * repl.telemetry.plain_tps for reply in repl.session.turns[1::2])
        return
    assert text.count("slower than plain: the draft (") == 1, text
    assert "— /profile ngram (drafts from the chat itself, no second model)" in text


def test_a_picked_draft_and_the_draft_length_keep_what_the_user_did_not_change(tmp_path, user_cache):
    """A draft picked in F2 replaces only the file: the profile draft's GPU layers and threads, and a combined
    method, stay; F6 and /draft reach the profiles' longest draft (256), not a shorter cap of their own."""
    from pathlib import Path

    from specchat.chats.choice import Choice, one_step
    from specchat.profiles import load_profile
    from specchat.profiles.schema import MAX_DRAFT

    preset = (Path(__file__).parents[2] / "profiles" / "ngram-draft.toml").read_text()
    text = preset.replace('model = "embedded:draft"\nn_gpu_layers = 0\nthreads = 0',
                          'model = "embedded:draft"\nn_gpu_layers = 3\nthreads = 1')
    text = re.sub(r'(?m)^n_max = "auto"', "n_max = 100", text)
    assert text.count("n_gpu_layers = 3") == 1 and "\nn_max = 100" in text
    path = tmp_path / "mine.toml"
    path.write_text(text)
    profile = load_profile(str(path))
    other = tmp_path / "other-draft.gguf"
    config = Choice(str(path), draft=other).config(profile)
    assert config.draft is not None and config.draft.path == other
    assert (config.draft.n_gpu_layers, config.draft.threads) == (3, 1)
    assert config.spec.method == "ngram+draft" and config.spec.n_max == 100
    assert one_step(100, 1) == 101 and one_step(MAX_DRAFT, 1) == MAX_DRAFT
    assert Choice(str(path)).with_draft_cap(config, 200).n_max == 200
    # A profile without a draft model of its own: the picked one drafts, on the target's threads.
    ngram = load_profile("ngram")
    picked = Choice("ngram", draft=other).config(ngram)
    assert picked.spec.method == "draft" and picked.draft is not None
    assert picked.draft.threads == picked.target.threads


async def test_the_default_profile_runs_as_its_copies_here_and_a_draft_model_is_one_key_away(settings):
    """``specchat`` with no profile: "suffix+draft" with "auto", which keeps the embedded draft model off where even
    a draft always right could not pay (a 2-core CPU), so nothing is guessed; Alt+2 (a favourite until the settings
    file lists its own) switches to tiny, whose draft model drafts — and the same prompt answered again there is the
    same reply."""
    from helpers import SIZE, ask, ready, wait_until

    from specchat.app.chat_app import make_app
    from specchat.engine.events import DraftSource
    from specchat.profiles import DEFAULT_PROFILE

    settings.profile = DEFAULT_PROFILE
    settings.max_tokens = 40
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = await ready(pilot)
        assert app.profile.name == "suffix-draft" and app.controller.facts.method == "suffix+draft"
        # Whether the draft model can pay is this machine's measurement (its verify costs and the draft's): where even
        # a draft always right could not (a 2-core CPU whose AMX does not run), the draft model never drafts; where
        # the costs leave hope, "auto" probes it now and then (engine/draft_length/policies.py, tested there). The
        # policy is re-priced as the context grows, so it is read before the reply and after it.
        policy = app.controller.backend.engine.speculation.length.acceptance
        hopeless = policy.hopeless
        first = await ask(pilot, "Name three rivers in Europe.")
        if hopeless and policy.hopeless:
            assert DraftSource.MODEL not in app.controller.telemetry.drafted_from
        await pilot.press("alt+2")
        await wait_until(pilot, lambda: app.busy is None and app.profile.name == "tiny")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: app.busy is None and app.chat_view.chat_log.last_reply is not first and app.chat_view.chat_log.last_reply is not None
                         and app.chat_view.chat_log.last_reply.finish_reason)
        again = app.chat_view.chat_log.last_reply.record
        assert (again.tokens, again.text) == (first.record.tokens, first.record.text)
        assert {"accepted", "corrected"} <= {kind for _, kind in again.segments}  # the draft model's colours
