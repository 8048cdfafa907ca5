"""What the user chose to run: a profile, perhaps another draft model, and the quick toggles on top of it.

A toggle is a new choice made from the one in use, so it goes through the same switch as a profile picked in F2 and
reloads only what changed: speculation switched off by hand keeps the target (and its KV cache) and the draft loaded
in-process, and a new draft length holds from the next message. A llama-server fixes both when it starts, so there a
toggle restarts the server, and says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..backends.run_config import RunConfig
from ..engine import ModelSettings
from ..engine.engine_config import DEFAULT_N_MAX, without_speculation
from ..engine.drafters import METHODS
from ..errors import Refused
from ..profiles import Profile, run_config
from ..profiles.schema import MAX_DRAFT

LONGEST_DRAFT = MAX_DRAFT  # the toggles' range is the profiles': a profile's n_max = 100 is not cut to less by "/draft +"


@dataclass(frozen=True)
class Choice:
    profile: str  # a profile's name or path
    draft: Path | None = None  # another draft model for the profile's target (F2's draft list)
    speculation_off: bool = False  # switched off by hand: the same target decodes plainly
    n_max: int | str | None = None  # the draft length set live ("auto" or tokens); None: the profile's

    def config(self, profile: Profile) -> RunConfig:
        """The configuration this choice means for ``profile`` (the one its name loads)."""
        config = run_config(profile)
        if self.draft is not None:
            config = dataclasses.replace(config, draft=self._draft_settings(config),
                                         spec=dataclasses.replace(config.spec, method=self._draft_method(config)))
        if self.n_max is not None:
            n_min = config.spec.n_min if self.n_max == "auto" else min(config.spec.n_min, int(self.n_max))
            config = dataclasses.replace(config, spec=dataclasses.replace(config.spec, n_max=self.n_max, n_min=n_min))
        if self.speculation_off:
            config = without_speculation(config)
            config = dataclasses.replace(config, spec=dataclasses.replace(config.spec, off_by_hand=True))
        return config

    def _draft_settings(self, config: RunConfig) -> ModelSettings:
        """The picked draft with the profile draft's settings (its GPU layers, its threads): only the file changed."""
        assert self.draft is not None
        if config.draft is not None:
            return dataclasses.replace(config.draft, path=self.draft)
        return ModelSettings(self.draft, threads=config.target.threads)

    @staticmethod
    def _draft_method(config: RunConfig) -> str:
        """The profile's method where it reads a draft model (``ngram+draft`` stays combined), else ``draft``."""
        return config.spec.method if METHODS[config.spec.method].draft_model else "draft"

    @property
    def same_profile(self) -> tuple[str, Path | None]:
        """What ``previous_profile`` compares: the toggles are not a profile of their own."""
        return self.profile, self.draft

    def toggled(self) -> Choice:
        return dataclasses.replace(self, speculation_off=not self.speculation_off)

    def with_draft_cap(self, config: RunConfig, n_max: int | str) -> Choice:
        """This choice drafting ``n_max`` tokens a step ("auto": the cost model's choice); ``config`` is what runs
        now. Refused where no draft is made here."""
        if self.speculation_off:
            raise Refused("no draft length to change: speculation is switched off by hand — Ctrl+T (app) or /spec on"
                          " (REPL) first")
        if config.spec.method == "none":
            raise Refused("no draft length to change: this profile does not speculate (method none)")
        if not config.backend_kind.switches_speculation:
            raise Refused("a remote server drafts the length it was started with — change it on the server")
        if isinstance(n_max, int) and not 1 <= n_max <= LONGEST_DRAFT:
            raise Refused(f"a draft length is 1 to {LONGEST_DRAFT} tokens, not {n_max}")
        if n_max == (self.n_max if self.n_max is not None else config.spec.n_max):
            raise Refused(f"the draft length is {n_max} already")
        return dataclasses.replace(self, n_max=n_max)


def one_step(cap: int | str, step: int) -> int:
    """The draft cap one token longer (``step`` 1) or shorter (-1) than ``cap``, within 1..LONGEST_DRAFT. From "auto"
    — no cap to step: the length it chose last is an echo of the policy, not a setting (issue #49) — the profiles'
    default fixed cap."""
    if not isinstance(cap, int):
        return DEFAULT_N_MAX
    return min(max(cap + step, 1), LONGEST_DRAFT)
