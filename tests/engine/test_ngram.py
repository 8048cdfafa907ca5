"""Prompt lookup on constructed token streams: which earlier occurrence a draft copies, and where it stops."""

from __future__ import annotations

import numpy as np
import pytest
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.events import TokenKind
from specchat.engine.llama import SequenceCache
from specchat.engine.loop import speculate
from specchat.engine.rules import Rules
from specchat.engine.sampling import SamplingParams

EOS = 99


class Vocabulary:
    n_vocab = 100

    def is_eog(self, token: int) -> bool:
        return token == EOS


RULES = Rules(SamplingParams(), np.random.default_rng(0), np.random.default_rng(1), Vocabulary())


def draft(seq: list[int], n_max: int = 16, key: tuple[int, int] = (2, 4)):
    return NgramDrafter(*key).propose(seq, n_max, RULES)


def test_draft_copies_what_followed_the_match():
    seq = [1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 1, 2, 3]
    d = draft(seq)
    assert d.tokens == [4, 5, 6, 7, 8, 50, 51, 1, 2, 3]  # up to the end of the conversation
    assert d.match == 3  # the three tokens before the copy equal the last three


def test_no_match_no_draft():
    assert draft([1, 2, 3, 4, 5, 6]).tokens == []


def test_the_most_recent_continuation_wins_among_equal_matches():
    # "7 8" was followed by 1 first, by 2 later: the latest text is the better guess.
    seq = [7, 8, 1, 30, 31, 7, 8, 2, 40, 41, 7, 8]
    assert draft(seq, key=(2, 2)).tokens[0] == 2


def test_the_longest_match_wins_over_a_more_recent_shorter_one():
    # The end "5 6 7 8" matches far back at the first occurrence (12 tokens), only 2 tokens at the later one.
    first = [20, 21, 22, 23, 24, 25, 26, 27, 5, 6, 7, 8, 60, 61, 62]
    later = [90, 7, 8, 70, 71]
    seq = first + later + [20, 21, 22, 23, 24, 25, 26, 27, 5, 6, 7, 8]
    d = draft(seq, key=(2, 2))
    assert d.tokens[:3] == [60, 61, 62] and d.match == 12


def test_the_draft_stops_where_equally_good_copies_diverge():
    # Two earlier copies of "1 2 3 4" went on alike for two tokens, then differently: beyond that nothing is known.
    seq = [1, 2, 3, 4, 10, 11, 12, 13, 9, 1, 2, 3, 4, 10, 11, 55, 56, 9, 1, 2, 3, 4]
    d = draft(seq)
    assert d.tokens == [10, 11]


def test_a_much_weaker_rival_does_not_cut_the_draft():
    # The long match (12 tokens) is trusted over a rival that matched only the 4-token key.
    long_copy = [30, 31, 32, 33, 34, 35, 36, 37, 1, 2, 3, 4, 10, 11, 12, 13]
    rival = [80, 1, 2, 3, 4, 50, 51]
    seq = long_copy + rival + [30, 31, 32, 33, 34, 35, 36, 37, 1, 2, 3, 4]
    assert draft(seq).tokens[:4] == [10, 11, 12, 13]


def test_a_draft_ends_with_the_first_end_of_generation_token():
    seq = [1, 2, 3, 4, 5, EOS, 6, 7, 1, 2, 3]
    assert draft(seq).tokens == [4, 5, EOS]


def test_index_grows_incrementally_and_starts_over_when_the_text_changes():
    drafter = NgramDrafter(2, 4)
    seq = [1, 2, 3, 4, 5, 6]
    assert drafter.propose(seq, 8, RULES).tokens == []
    seq += [1, 2]
    assert drafter.propose(seq, 8, RULES).tokens == [3, 4, 5, 6, 1, 2]
    drafter.reset()
    assert drafter.propose([9, 9, 1, 2], 8, RULES).tokens == []


@pytest.mark.parametrize("n_max", [1, 4, 64])
def test_drafts_are_never_longer_than_asked(n_max):
    seq = list(range(1, 90)) + list(range(1, 10))
    assert len(draft(seq, n_max=n_max).tokens) <= n_max


def test_a_remembered_reply_drafts_in_a_later_conversation():
    drafter = NgramDrafter(2, 4)
    drafter.remember([40, 41, 1, 2, 3, 4, 5, 6, 7])  # the text before an earlier reply, and the reply
    drafter.reset()  # a new conversation: what was remembered stays
    d = drafter.propose([9, 41, 1, 2, 3], 16, RULES)
    assert d.tokens == [4, 5, 6, 7] and d.match == 4
    drafter.forget()
    assert drafter.propose([9, 41, 1, 2, 3], 16, RULES).tokens == []


def test_replies_remembered_from_a_forgotten_chat_draft_nothing_and_the_other_chats_still_do():
    drafter = NgramDrafter(2, 4)
    drafter.remember([40, 41, 1, 2, 3, 4, 5], chat=7)  # a chat later deleted, or made private
    drafter.remember([50, 51, 8, 9, 10, 11], chat=8)
    drafter.remember([60, 61, 12, 13, 14], chat=None)  # a script's reply, in no stored chat
    assert drafter.propose([9, 1, 2, 3], 16, RULES).tokens == [4, 5]
    drafter.forget_chats({7})
    assert drafter.propose([9, 1, 2, 3], 16, RULES).tokens == []
    assert drafter.propose([0, 8, 9], 16, RULES).tokens == [10, 11]
    assert drafter.propose([0, 12, 13], 16, RULES).tokens == [14]
    assert drafter.remembered == 6 + 5


def test_a_remembered_reply_that_ends_where_the_match_does_proposes_nothing_past_it():
    """The next remembered sequence follows a separator, which is no token: it once came out as draft token -1 and
    llama_decode failed ("no KV slot") mid-reply."""
    drafter = NgramDrafter(2, 4)
    drafter.remember([5, 6, 7])
    drafter.remember([8, 9, 10])
    assert drafter.propose([1, 6, 7], 16, RULES).tokens == []
    drafter.remember([6, 7, 11])  # another copy that does go on: only it answers
    assert drafter.propose([1, 6, 7], 16, RULES).tokens == [11]


def test_the_conversation_wins_over_memory_on_an_equal_match():
    drafter = NgramDrafter(2, 2)
    drafter.remember([1, 2, 50, 51])
    assert drafter.propose([1, 2, 60, 61, 1, 2], 4, RULES).tokens == [60, 61, 1, 2]


def test_memory_is_bounded():
    drafter = NgramDrafter(2, 4)
    for start in range(0, 3 * NgramDrafter.MEMORY_TOKENS, 1000):
        drafter.remember(list(range(start, start + 1000)))
    assert drafter.remembered < NgramDrafter.MEMORY_TOKENS
    assert drafter.propose([5, 3 * NgramDrafter.MEMORY_TOKENS - 10, 3 * NgramDrafter.MEMORY_TOKENS - 9], 4,
                           RULES).tokens == [3 * NgramDrafter.MEMORY_TOKENS - 8 + i for i in range(4)]


class Counting(SequenceCache):
    """A target that always continues with the next number: its greedy token after t is t + 1."""

    n_vocab = Vocabulary.n_vocab

    def decode(self, tokens, *, all_logits: bool = False) -> None:
        self.cached.extend(tokens)
        rows = np.full((len(tokens), self.n_vocab), -1e9)
        rows[np.arange(len(tokens)), [min(t + 1, self.n_vocab - 1) for t in tokens]] = 0.0
        self._rows = rows if all_logits else rows[-1:]

    def logits(self) -> np.ndarray:
        return self._rows

    def truncate(self, n_keep: int) -> None:
        del self.cached[n_keep:]


@pytest.mark.parametrize(("verified", "judged", "kind"), [
    (0, [True], TokenKind.TARGET),  # a plain step: the proposal's first token (4) was the target's
    (2, [True, True, False], TokenKind.BONUS),  # 4, 5 accepted; the proposal's next (9) is not the target's 6
    (4, [True, True, False], TokenKind.CORRECTED),  # 4, 5 accepted, 9 rejected: the positions after it are unjudged
])
def test_every_step_judges_the_proposal_as_far_as_the_target_shows(verified, judged, kind):
    seq = [1, 2, 3, 4, 5, 9, 10, 1, 2, 3]  # proposal after the last 1, 2, 3: 4, 5, 9, 10, 1, 2, 3
    target = Counting()
    target.decode(seq[:-1])
    outcome = speculate(target, seq, NgramDrafter(), 16, RULES, choose=lambda draft: verified)
    assert outcome.drafted == verified and outcome.kind == kind and outcome.match == 3
    assert outcome.judgements() == judged
