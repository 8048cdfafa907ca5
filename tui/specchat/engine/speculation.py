"""What drafts and how far, for one engine: the profile's drafter, its draft-length policy and the costs it is priced by.

``Speculation.configure`` sets it up for an engine's configuration and loaded models, again whenever the method,
sampling or a model changes. The drafter is the one the method's module builds (``drafters.METHODS``: a new drafter is
one module of ``drafters/``, docs/extending.md: "Adding a drafter"); a new draft-length policy is one class with the
``draft_length.DraftLength`` protocol, chosen in ``configure``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from time import perf_counter

import numpy as np

from .. import paths
from . import machine
from .draft_length.auto_length import AUTO_K_MAX, Adaptive
from .draft_length.policies import VerifyCost
from .draft_length.learned_store import LearnedStore
from .engine_config import SWITCHED_OFF_BY_HAND, EngineConfig, ModelSettings, SpecConfig
from .draft_length.costs import (QUIET_OTHERS, CostCache, busy_timings, drop_busy, measure_depth_slope,
                                 measure_verify_cost, probe_verify_cost, quiet, sizes_up_to, watched)
from .draft_length import DraftLength, FixedLength
from .drafters import METHODS, Drafter, Parts
from .drafters.stored_chats import StoredChatsDrafter
from .drafters.ngram import NgramDrafter
from .events import SpeculationState
from .draft_length.learned_costs import LearnedVerifyCost
from .llama import Context, Model
from .loading import LoadedDraft, LoadedTarget
from .loop import StepOutcome
from .rules import Rules

# "Off" is never for good (issue #47): where "auto" judged that nothing can win, the verify costs it judged by are
# probed again between replies (1 and 8 rows, and a new sweep when they disagree), each probe paid from this share of
# the decoding time since the last one. A curve timed in a busy window is probed after the first reply the machine is
# quiet for, whatever the budget says: it was never this machine's curve.
RETIME_SHARE = 0.02


class Speculation:
    """Not thread-safe, as the engine that owns it. What "auto" learned about a configuration survives a switch away
    and back (an A/B run, a toggle) until the target changes (``forget_target``)."""

    def __init__(self, config: EngineConfig) -> None:
        self._learned: dict[tuple[SpecConfig, object, object], Adaptive] = {}
        self._learned_costs: dict[str, LearnedVerifyCost] = {}  # per target, threads and sweep: shared by methods
        self.ngram = NgramDrafter(config.spec.ngram_min, config.spec.ngram_max)
        self.stored_chats = StoredChatsDrafter()  # earlier chats, once the engine is given them (``Engine.learn_stored_chats``)
        self._retime_credit = 0.0  # seconds of probing the decoding since the last probe has paid for
        self._probe_s = 0.3  # what the last probe took (the first one's guess: 1 and 8 rows thrice, and its window)

    def configure(self, config: EngineConfig, target: LoadedTarget, draft: LoadedDraft | None, depth: int) -> None:
        """Speculate as ``config`` says with these models; ``depth``: the conversation's tokens now."""
        self.config, self._target, self._draft = config, target, draft
        spec, sampling = config.spec, config.sampling
        if self.ngram.sizes != range(spec.ngram_max, spec.ngram_min - 1, -1):
            self.ngram = NgramDrafter(spec.ngram_min, spec.ngram_max)
        self.verify: VerifyCost | None = None
        if spec.method != "none":
            longest = max(AUTO_K_MAX.values()) if spec.adaptive else int(spec.n_max)
            self.verify = self._costs(target.model, target.ctx, config.target, sizes_up_to(longest + 1),
                                      "the target's verify batches")
        self.length: DraftLength
        if spec.adaptive and self.verify is not None:
            key = (spec, draft.identity if draft is not None else None, replace(sampling, seed=0))
            if key not in self._learned:
                self._learned[key] = self._new_auto(self.verify, depth)
            self.length = self._learned[key]
        else:
            self.length = FixedLength(0 if spec.method == "none" else int(spec.n_max))
        self._build_drafter()
        seed = sampling.seed
        self.rules = Rules(sampling, np.random.default_rng(seed), np.random.default_rng(seed + 1), target.model,
                           n_min=spec.n_min, p_min=spec.p_min)

    def follow(self, config: EngineConfig, draft: LoadedDraft | None) -> None:
        """A change that needs no new set-up (threads, a draft model no longer named): costs are looked up for the
        configuration as it is now."""
        self.config, self._draft = config, draft
        self._build_drafter()

    def forget_target(self) -> None:
        """The target changed: what was learned about the old one means nothing, nor are its token ids the new one's."""
        self._learned.clear()
        self._learned_costs.clear()
        self.ngram.forget()
        self.stored_chats = StoredChatsDrafter()

    def _build_drafter(self) -> None:
        """The method's drafter for the models loaded now (None: plain decoding, or a method only a llama.cpp server
        runs)."""
        build = METHODS[self.config.spec.method].build
        model = self._draft.drafter if self._draft is not None else None
        self.drafter: Drafter | None = build(Parts(self.ngram, model, self.length, self.stored_chats)) if build is not None else None

    def state(self) -> SpeculationState:
        method = self.config.spec.method
        if method == "none":
            return SpeculationState(method, False, SWITCHED_OFF_BY_HAND if self.config.spec.off_by_hand
                                    else "method is 'none' (plain decoding)")
        drafter = self.drafter
        if drafter is not None and drafter.blocked:
            return SpeculationState(method, False, drafter.blocked)
        if not self.length.active:
            return SpeculationState(method, False, self.length.reason + self._retime_plan())
        return SpeculationState(method, True)

    @property
    def draft_length(self) -> int:
        """The draft length in use: the profile's cap when it is fixed, or the one "auto" chose last."""
        return self.length.in_use

    @property
    def max_verify(self) -> int | None:
        """The most tokens one verify batch may hold: the largest batch measured exact on this backend (None: no
        limit, when not even two rows were exact — see ``Engine.notes``)."""
        return self.verify.exact if self.verify is not None and self.verify.exact >= 2 else None

    def notes(self) -> list[str]:
        """Where speculation does differently from what the configuration says, each as one line to show once."""
        notes = []
        spec, sampling = self.config.spec, self.config.sampling
        if spec.uses_draft_model and spec.n_min > 0 and not sampling.greedy:
            notes.append(f"n_min {spec.n_min} applies to the draft model only at temperature 0: dropping a sampled"
                         " draft for being short would bias the output, so its short sampled drafts are verified too"
                         + (" (short copies, which are one-hot, are still dropped)" if spec.copies else ""))
        if self.config.kv_cache == "f16" and self.config.target.n_gpu_layers == 0 and spec.method != "none":
            notes.append('kv_cache "f16": beyond 256 tokens of context llama.cpp\'s CPU attention computes a lone token'
                         " differently from a batch, so greedy output with speculation can differ from plain decoding"
                         ' where two tokens nearly tie — "q8_0" (the default) or "bf16" keep them identical')
        target = self._target
        ours = cost_key(target.model, target.ctx, self.config.target)
        busy = [others for key, others in busy_timings().items() if key.startswith(ours)]
        if busy and spec.method != "none":
            notes.append(f"verify costs timed while other processes kept {max(busy):.1f} cores busy: they serve this"
                         " process only, until they are timed again after a reply on a quiet machine")
        verify = self.verify
        if verify is not None and verify.exact < 2:
            notes.append("on this backend a batch's logits differ from one-at-a-time decoding (measured): greedy output"
                         " with speculation can differ from plain decoding where two tokens nearly tie")
        elif verify is not None and not spec.adaptive and verify.exact < int(spec.n_max) + 1:
            notes.append(f"drafts are verified {verify.exact - 1} tokens at most, not n_max {spec.n_max}: larger"
                         f" batches are computed with other kernels on this backend (measured) and could change the"
                         " output")
        return notes

    # -- a reply's steps ----------------------------------------------------------------------------------------

    def begin_reply(self) -> None:
        self.length.begin_reply()

    def begin_step(self, limit: int) -> tuple[int, Callable[[int], int] | None]:
        """A step begins: the most draft tokens it may verify, and who chooses from a proposed draft (n-gram
        "auto")."""
        if self.drafter is not None:
            self.drafter.begin_step()
        return self.length.plan(limit)

    def stepped(self, outcome: StepOutcome, depth: int, tokens: list[int]) -> None:
        """A step verified at ``depth``: "auto" learns from it, the drafter sees the conversation it left."""
        drafter = self.drafter
        self.length.observe(outcome, depth, drafter.turned_down if drafter is not None else None)
        if drafter is not None:
            drafter.notice(tokens)

    def end_reply(self, prompt_tail: list[int] | None, reply: list[int], chat: int | None, quiet: bool = True) -> None:
        """The reply and the prompt tokens before it are kept for drafts — asking again, regenerating — unless
        ``prompt_tail`` is None (a private chat's); ``chat``: the stored chat they came from. ``quiet``: no other
        process kept the cores busy during the reply, so the costs it timed may be kept for the next process."""
        if reply and prompt_tail is not None:
            self.ngram.remember(prompt_tail + reply, chat)
        self.length.keep(quiet)  # the next process starts from here

    # -- re-timing the costs between replies ("off" is never for good) ------------------------------------------

    def _verify_key(self) -> str:
        target = self._target
        return f"{cost_key(target.model, target.ctx, self.config.target)}|sizes={self.verify.sizes}"

    def _slope_key(self) -> str:
        target = self._target
        return f"{cost_key(target.model, target.ctx, self.config.target)}|depth slope"

    def _timed_busy(self) -> bool:
        busy = busy_timings()  # (empty on a quiet start: the keys, a few milliseconds to compute, are not needed)
        return bool(busy) and self.verify is not None and (self._verify_key() in busy or self._slope_key() in busy)

    def _retime_plan(self) -> str:
        """What the reason "auto" is off adds: when its costs are timed again."""
        if not isinstance(self.length, Adaptive):
            return ""
        if self._timed_busy():
            return " — the costs were timed while other processes kept the cores busy: timed again after a quiet reply"
        return f" — its costs are timed again now and then, between replies (at most {RETIME_SHARE:.0%} of the time)"

    def retime(self, decoded_s: float, others: float | None, depth: int) -> bool:
        """Between replies (``decoded_s``: the reply's decoding; ``others``: the cores other processes kept busy when
        last looked at): probe the target's verify costs where "auto" is off or they were timed in a busy window, and
        time them again where a quiet probe disagrees. Returns True when the policies were priced anew."""
        if self.verify is None or not isinstance(self.length, Adaptive):
            return False
        target = self._target
        if target.ctx.n_ctx - len(target.ctx.cached) < self.verify.sizes[-1]:
            return False  # no room left to time the sweep's largest batch at the end of this chat
        if not self.length.active:  # the budget is of the decoding while off, not of a session's
            self._retime_credit += RETIME_SHARE * decoded_s
        if self._timed_busy():
            if others is not None and others >= QUIET_OTHERS:
                return False  # still busy: a probe could not judge, and would only cost
        elif self.length.active or self._retime_credit < self._probe_s:
            return False
        verify, key = self.verify, self._verify_key()
        token = max(target.model.bos, 0)
        slope = self.depth_slope()
        started = perf_counter()
        agrees, window = watched(lambda: probe_verify_cost(target.ctx, token, slope)(verify))
        self._probe_s = perf_counter() - started
        self._retime_credit = max(0.0, self._retime_credit - self._probe_s)
        cache = CostCache(paths.verify_costs_file())
        if not quiet(window):
            return False
        slope_busy = self._slope_key() in busy_timings()
        drop_busy(self._slope_key())  # timed again, quietly, as the policies are priced anew below
        if agrees and key not in busy_timings():
            if not slope_busy:
                return False
        else:  # a quiet probe disagreed, or the curve in use was timed in a busy window: timed again, quietly

            def at_no_depth() -> VerifyCost:  # timed at the end of this chat; kept as of an empty cache
                depth, timed = len(target.ctx.cached), measure_verify_cost(target.ctx, token, verify.sizes)
                return VerifyCost(timed.sizes, tuple(max(s - slope * b * depth, 0.25 * s)
                                                     for b, s in zip(timed.sizes, timed.seconds)), timed.exact)

            self.verify = cache.measure_again(key, at_no_depth, "the target's verify batches again")
        self._learned.clear()  # every policy priced by the old curve; what they learned is in the memory (keep)
        self._learned_costs.clear()
        rules = self.rules  # its random draws go on where they were: re-timing changes no sampled reply
        self.configure(self.config, target, self._draft, depth)
        self.rules = rules
        return True

    # -- costs --------------------------------------------------------------------------------------------------

    def depth_slope(self) -> float:
        """How much a step slows per token of context, measured once per model, threads and KV cache."""
        target = self._target
        token = max(target.model.bos, 0)
        return CostCache(paths.verify_costs_file()).get_slope(self._slope_key(),
                                                              lambda: measure_depth_slope(target.ctx, token))

    def _new_auto(self, verify: VerifyCost, depth: int) -> Adaptive:
        """The draft-length policies of "auto", with what this target's costs and an earlier process taught them."""
        config, target, draft = self.config, self._target, self._draft
        spec, sampling = config.spec, config.sampling
        exact = self.max_verify or max(AUTO_K_MAX.values()) + 1
        k_max = {kind: min(longest, exact - 1) for kind, longest in AUTO_K_MAX.items()}
        costs_key = f"costs|{cost_key(target.model, target.ctx, config.target)}|sizes={verify.sizes}"
        if costs_key not in self._learned_costs:
            self._learned_costs[costs_key] = LearnedVerifyCost(verify, self.depth_slope())
        draft_cost = None
        if spec.uses_draft_model:
            assert draft is not None and config.draft is not None
            draft_cost = self._costs(draft.model, draft.ctx, config.draft, (1,), "a draft model step").seconds[0]
        draft_id = draft.model.identity if draft is not None else None
        key = (f"auto|{target.model.identity}|kv={target.ctx.kv_cache}|{spec.method}|draft={draft_id}"
               f"|n_min={spec.n_min}|p_min={spec.p_min}|ngram={spec.ngram_min}-{spec.ngram_max}"
               f"|temperature={sampling.temperature}|top_k={sampling.top_k}|top_p={sampling.top_p}"
               f"|min_p={sampling.min_p}")
        return Adaptive.open(self._learned_costs[costs_key], spec.copies, k_max, draft_cost,
                             LearnedStore(paths.auto_learned_file()), key, costs_key, depth, recalls=spec.reads_stored_chats)

    @staticmethod
    def _costs(model: Model, ctx: Context, settings: ModelSettings, sizes: tuple[int, ...], what: str) -> VerifyCost:
        token = max(model.bos, 0)
        return CostCache(paths.verify_costs_file()).get(f"{cost_key(model, ctx, settings)}|sizes={sizes}",
                                                        lambda: measure_verify_cost(ctx, token, sizes),
                                                        probe_verify_cost(ctx, token), what)


def cost_key(model: Model, ctx: Context, settings: ModelSettings) -> str:
    """What a measured cost holds for: the model, its threads, GPU layers and KV cache, this machine and this build
    of llama.cpp (engine/machine.py)."""
    return (f"{model.identity}|threads={settings.threads}|gpu_layers={settings.n_gpu_layers}|kv={ctx.kv_cache}"
            f"|{machine.fingerprint(settings.n_gpu_layers)}")
