"""Quick toggles (issue "steer and inspect speculation with one key"): speculation off and on by hand, back to the
previous profile, the draft length one token longer or shorter — through the chat controller on the in-process and
the llama-server backends, in the app (Pilot) and in the REPL. Greedy replies stay plain decoding's whatever is
toggled; in-process, a toggle reloads nothing and the target's cache is kept."""

from __future__ import annotations

import pytest

from backend_kinds import TURNS, ask, controller_for, write_profile
from specchat.chats.controller import Refused
from specchat.engine.config import SWITCHED_OFF_BY_HAND

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

        switched = controller.switch(controller.speculation_toggled())
        controller.profile_switched(switched)
        assert switched.announcement(before) == f"speculation off, by hand: {TOOK[kind]}"
        state = controller.facts.speculation
        assert not state.active and state.reason == SWITCHED_OFF_BY_HAND
        off = ask(controller, TURNS[1])
        same(off, expected[1])
        assert off.stats["drafted"] == 0 and off.stats["method"] == "none"
        assert cache_kept(off) == (kind == "in-process")

        controller.profile_switched(controller.switch(controller.speculation_toggled()))
        assert controller.facts.speculation.active
        on = ask(controller, TURNS[2])
        same(on, expected[2])
        assert on.stats["drafted"] > 0 and cache_kept(on) == (kind == "in-process")

        before = controller.choice
        switched = controller.switch(controller.draft_length(1))
        controller.profile_switched(switched)
        assert switched.announcement(before) == f"draft length 5: {TOOK[kind]}"
        assert controller.facts.n_max == 5 and controller.backend.config.spec.n_max == 5
        longer = ask(controller, "Thanks!")
        same(longer, expected[3])
        assert longer.stats["n_max"] == 5

        with pytest.raises(Refused, match="no earlier profile"):
            controller.previous_profile()
    finally:
        controller.close()


def test_previous_profile_goes_back_with_its_toggles(tmp_path):
    from pathlib import Path

    controller = controller_for(Path(__file__).parents[1] / "profiles" / "tiny.toml")
    try:
        controller.profile_switched(controller.switch(controller.draft_length(-1)))  # tiny, 3 tokens a step
        controller.profile_switched(controller.switch_profile("ngram"))
        assert controller.facts.method == "ngram"
        back = controller.previous_profile()
        controller.profile_switched(controller.switch(back))
        assert controller.profile.name == "tiny" and controller.facts.method == "draft" and controller.facts.n_max == 3
        # and F4 again: back to ngram, as `cd -` does
        controller.profile_switched(controller.switch(controller.previous_profile()))
        assert controller.profile.name == "ngram"
    finally:
        controller.close()


def test_what_cannot_be_toggled_says_why_in_one_line(tmp_path, llama_server, servers):
    from pathlib import Path

    controller = controller_for(Path(__file__).parents[1] / "profiles" / "baseline.toml")
    try:
        with pytest.raises(Refused, match="does not speculate"):
            controller.speculation_toggled()
        with pytest.raises(Refused, match="speculation is off"):
            controller.draft_length(1)
    finally:
        controller.close()
    controller = controller_for(write_profile(tmp_path, "remote-llama", binary=llama_server, servers=servers))
    try:
        with pytest.raises(Refused, match="a remote server drafts the length it was started with"):
            controller.draft_length(1)
    finally:
        controller.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_keys_in_the_app(kind, tmp_path, settings, llama_server, servers):
    from test_app import SIZE, ask as ask_in_app, wait_until

    from specchat.app.chat_app import make_app

    settings.profile = str(write_profile(tmp_path, kind, binary=llama_server, servers=servers))
    settings.max_tokens = 24
    async with make_app(settings).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_until(pilot, lambda: app.backend is not None and app.busy is None)

        def shown() -> str:
            return " ".join(app.sidebar.plain.split())

        def notes() -> list[str]:
            return [str(n.message) for n in app._notifications]

        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: app.busy is None and " INACTIVE " in f" {shown()} ")
        assert "switched off by hand" in shown() and f"speculation off, by hand: {TOOK[kind]}" in notes()
        await ask_in_app(pilot, "Say hi.")
        assert app.conversation.last_reply.stats["drafted"] == 0

        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: app.busy is None and " ACTIVE " in f" {shown()} ")
        await pilot.press("f6")
        await wait_until(pilot, lambda: app.busy is None and "draft length 5" in shown())
        await ask_in_app(pilot, "Say hello.")
        reply = app.conversation.last_reply
        assert reply.stats["drafted"] > 0 and reply.stats["n_max"] == 5
        await pilot.press("f5")
        await wait_until(pilot, lambda: app.busy is None and "draft length 4" in shown())

        await pilot.press("f4")
        await pilot.pause(0.2)
        assert any("no earlier profile" in note for note in notes()) and app.busy is None


@pytest.mark.parametrize("kind", KINDS)
def test_the_commands_in_the_repl(kind, tmp_path, llama_server, servers):
    from test_repl import CTRL_D, run_repl

    from specchat.repl.shell import ReplSettings

    profile = write_profile(tmp_path, kind, binary=llama_server, servers=servers)
    settings = ReplSettings(str(profile), db_path=tmp_path / "chats.sqlite3", max_tokens=24, color=False)
    keys = ["/spec off\r", "Say hi.\r", "/spec on\r", "/draft +\r", "Say hello.\r", "/draft auto\r",
            "/profile ngram\r", "/profile -\r", CTRL_D]
    repl, _, text = run_repl(settings, *keys)
    assert f"speculation off, by hand: {TOOK[kind]}" in text and "speculation off: " + SWITCHED_OFF_BY_HAND in text
    assert f"speculation on again: {TOOK[kind]}" in text and f"draft length 5: {TOOK[kind]}" in text
    assert "draft length auto: " in text and "profile ngram: " in text
    replies = repl.session.turns[1::2]
    assert replies[0].stats["drafted"] == 0 and replies[1].stats["drafted"] > 0 and replies[1].stats["n_max"] == 5
    assert repl.profile.name == profile.stem and repl.controller.choice.n_max == "auto"  # /profile - came back
    assert "specchat:" not in text, text
