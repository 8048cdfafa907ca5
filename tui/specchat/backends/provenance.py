"""Token provenance from llama-server's stream: which token was an accepted draft, a correction, a bonus or plain.

With ``"timings_per_token": true`` every streamed token carries the reply's cumulative ``draft_n`` and
``draft_n_accepted``, and they step up at the first token of each verify step. A step that adds d drafted and a
accepted emits a accepted tokens, then the target's own: a correction when a < d, a bonus when a = d. A token that
changes neither counter outside such a step comes from a plain step. The server does not say which draft tokens it
rejected, only how many.

Tokens held back inside a UTF-8 character arrive together, under the counters of the last of them; a change of the
counters then belongs to the first token after the step in progress, never to a token of that step. (Should a held-back
run span two drafting steps, their counts are one step's: the totals stay the server's.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.events import StepVerified, TokenKind


@dataclass
class _Step:
    number: int
    drafted: int
    accepted: int
    left: int  # tokens of this step still to come


class StepTracker:
    def __init__(self) -> None:
        self.drafted = self.accepted = 0  # the cumulative counters last seen
        self.steps = 0
        self.drafting = False  # whether the last token's step judged a draft
        self._step: _Step | None = None
        self._first = True

    def token(self, draft_n: int | None, draft_n_accepted: int | None) -> tuple[TokenKind, int, int, list[StepVerified]]:
        """The kind, step and position in the step of the next streamed token, and the steps it closed (in order)."""
        closed: list[StepVerified] = []
        if self._first:  # the prefill's token: no step judged it (the counters start at 0 with each request)
            self._first = False
            return TokenKind.TARGET, 0, 0, closed
        drafted, accepted = draft_n or self.drafted, draft_n_accepted or self.accepted
        if self._step is None and (drafted, accepted) != (self.drafted, self.accepted):
            self.steps += 1
            d, a = drafted - self.drafted, accepted - self.accepted
            self.drafted, self.accepted = drafted, accepted
            self._step = _Step(self.steps, d, a, a + 1)
        elif self._step is None:
            self.steps += 1
            self._step = _Step(self.steps, 0, 0, 1)
        step = self._step
        position = step.accepted + 1 - step.left  # 0-based within the step
        step.left -= 1
        if step.drafted == 0:
            kind = TokenKind.TARGET
        elif position < step.accepted:
            kind = TokenKind.ACCEPTED
        else:
            kind = TokenKind.BONUS if step.accepted == step.drafted else TokenKind.CORRECTED
        self.drafting = step.drafted > 0
        if step.left == 0:
            closed += self.close()
        return kind, step.number, position, closed

    def cut(self) -> list[StepVerified]:
        """End the step in progress at the reply's limit: only what was shown of it counts — its accepted tokens
        shown, and its draft as judged up to them (the server went on past the limit, for ids the reply needed)."""
        step = self._step
        if step is not None and step.left > 0 and step.drafted:
            shown = step.accepted + 1 - step.left
            if shown <= step.accepted:  # cut inside the accepted run: the step as far as it was shown
                step.drafted = step.accepted = shown
        return self.close()

    def close(self) -> list[StepVerified]:
        """End the step in progress (its last token came, or the reply ended before it)."""
        step, self._step = self._step, None
        if step is None:
            return []
        return [StepVerified(step.number, step.drafted, step.accepted, 0, 0, step.drafted, 0)]
