"""Cancel-and-switch storms through Pilot on the real model, with the invariants checked after every round.

A round: send a prompt, press Esc at a random moment, switch profile with F2 (a parameter-only switch and a full
reload in turn), and send again on the next round. Used with a few rounds by test_reliability.py and with 200 by
benchmarks/stress/storms.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as lc

from gguf_fixtures import write_variant
from specchat.app.chat_app import SpecchatApp
from specchat.app.screens.modals import ProfileScreen
from specchat.app.chat.prompt import PromptInput
from specchat.app.chat.reply import ReplyView
from specchat.chats.store import Store
from specchat.telemetry.memory import rss_bytes
from helpers import wait_until

PROMPTS = ["Write a long story about a lighthouse.", "List ten fruits and their colours.", "Explain how a bicycle works.",
           "Name three planets."]


def storm_profiles(folder: Path, target: Path) -> list[str]:
    """User profiles for the storm, in the order it visits them: each step alternates a parameter-only switch (same
    target, other method or draft length) and a full reload (another target file)."""
    folder.mkdir(parents=True, exist_ok=True)
    other = write_variant(target, folder / "other-target.gguf", set_keys={"general.name": "another model"})
    profiles = {
        "storm-ngram": f'[target]\nmodel = "{target}"\n[draft]\nmethod = "ngram"\nn_max = 8\n',
        "storm-other": f'[target]\nmodel = "{other}"\n[draft]\nmethod = "ngram"\nn_max = 4\n',
        "storm-other-none": f'[target]\nmodel = "{other}"\n[draft]\nmethod = "none"\n',
        "storm-back": f'[target]\nmodel = "{target}"\n[draft]\nmethod = "ngram"\nn_max = 4\n',
    }
    for name, text in profiles.items():
        (folder / f"{name}.toml").write_text(text)
    return list(profiles)


@dataclass
class StormLog:
    rounds: int = 0
    cancelled: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    rss: list[int] = field(default_factory=list)


def check_invariants(app: SpecchatApp, db: Path) -> None:
    """The KV cache is the tokenised history; the reply record, its view and the store agree."""
    engine = app.backend.engine
    cached = engine.ctx.cached
    # What llama.cpp itself holds: positions 0..len(cached) - 1 of sequence 0, no more.
    pos_max = lc.llama_memory_seq_pos_max(lc.llama_get_memory(engine.ctx.ptr), 0)
    assert pos_max == len(cached) - 1, (pos_max, len(cached))
    # The engine holds the session's history — or, once the context filled, its system prompt and latest turns — and
    # that, tokenised again, is its tokens; the cache holds them all but at most the last generated token (decoded at
    # the next step) — or, when Esc stopped the prefill, the part of the prompt it decoded (the next prefill goes on).
    history = app.session.engine_messages(app.backend.target_id)
    if history and history[-1].role == "assistant":
        held = engine.messages
        system = [m for m in history[:1] if m.role == "system"]
        turns = held[len(system):]
        assert held[:len(system)] == system and turns and history[len(history) - len(turns):] == turns
        rebuilt, _ = engine.chat.rebuild(held)
        assert rebuilt == engine.tokens
    record = app.session.last_reply
    stopped_in_prefill = record is not None and record.finish_reason == "cancelled" and not record.tokens
    assert cached == engine.tokens[:len(cached)], (len(cached), len(engine.tokens), record and record.finish_reason)
    assert stopped_in_prefill or len(cached) >= len(engine.tokens) - 1, (len(cached), len(engine.tokens))
    if record is not None:
        view = list(app.query(ReplyView))[-1]
        assert view.segments == record.segments
        stored = Store(db)
        try:
            last = stored.messages(app.session.id)[-1]
        finally:
            stored.close()
        assert [tuple(s) for s in last.segments] == record.segments and last.finish_reason == record.finish_reason


async def storm(pilot, rounds: int, profiles: list[str], db: Path, rng: random.Random, log: StormLog,
                new_chat_every: int = 0) -> None:
    """``rounds`` rounds; with ``new_chat_every``, a new chat (Ctrl+N) after every that many rounds."""
    app: SpecchatApp = pilot.app
    for round_ in range(rounds):
        prompt = app.query_one(PromptInput)
        prompt.load_text(rng.choice(PROMPTS))
        await pilot.press("enter")
        await pilot.pause(rng.uniform(0.0, 1.5))
        if app.busy is not None:
            await pilot.press("escape")
        await wait_until(pilot, lambda: app.busy is None and app.session.last_reply is not None
                    and app.session.last_reply.finish_reason is not None)
        log.cancelled += app.session.last_reply.finish_reason == "cancelled"
        check_invariants(app, db)
        name = profiles[round_ % len(profiles)]
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen))
        options = app.screen.query_one("#profile-list")
        options.highlighted = next(i for i in range(options.option_count)
                                   if options.get_option_at_index(i).id == f"profile:{name}")
        target = app.backend.engine.target
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.busy is None and app.profile is not None and app.profile.name == name)
        action = "parameters" if app.backend.engine.target is target else "full reload"
        log.actions[action] = log.actions.get(action, 0) + 1
        log.rounds += 1
        if new_chat_every and log.rounds % new_chat_every == 0:
            await pilot.press("ctrl+n")
            await wait_until(pilot, lambda: app.session.last_reply is None and not app.query(ReplyView))
        log.rss.append(rss_bytes() or 0)
