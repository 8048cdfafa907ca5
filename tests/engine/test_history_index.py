"""The index over earlier chats (``engine.drafters.stored_chats``), checked against a brute-force search of the same
tokens and against worked examples of its frequency scoring."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specchat.engine.drafters import stored_chats
from specchat.engine.conversation import Forgotten
from specchat.engine.drafters.stored_chats import SEPARATOR, StoredChatsDrafter, StoredChatsIndex, suffix_array
from specchat.engine.rules import Rules
from specchat.engine.sampling import SamplingParams


class Vocab:
    n_vocab = 100

    def is_eog(self, token: int) -> bool:
        return token == 99


RULES = Rules(SamplingParams(), np.random.default_rng(0), np.random.default_rng(1), Vocab())


def brute_longest(documents: list[list[int]], seq: list[int]) -> tuple[int, list[int]]:
    """The longest end of ``seq`` found inside one document, and where the text after each occurrence begins (as
    positions in the documents laid end to end after a separator each)."""
    text: list[int] = []
    for tokens in documents:
        text += [SEPARATOR, *tokens]
    best, follows = 0, []
    for m in range(1, min(stored_chats.MAX_MATCH, len(seq)) + 1):
        tail = seq[-m:]
        found = [i + m for i in range(len(text) - m + 1) if text[i:i + m] == tail]
        if not found:
            break
        best, follows = m, found
    return best, follows


@pytest.mark.parametrize("seed", range(8))
def test_the_longest_match_and_its_occurrences_are_the_brute_force_ones(seed):
    rng = random.Random(seed)
    documents = [[rng.randrange(6) for _ in range(rng.randrange(1, 60))] for _ in range(12)]
    index = StoredChatsIndex([((1, i), d) for i, d in enumerate(documents)])
    for _ in range(50):
        seq = [rng.randrange(6) for _ in range(rng.randrange(1, 30))]
        match, lo, hi = index.longest_match(seq)
        expected, follows = brute_longest(documents, seq)
        assert match == expected
        if match:
            total = index.tokens
            assert sorted(total - int(p) for p in index._array[lo:hi]) == sorted(follows)


def test_the_suffix_array_sorts_every_suffix():
    rng = np.random.default_rng(3)
    text = rng.integers(-1, 4, size=300).astype(np.int32)
    order = suffix_array(text, 512)
    suffixes = [tuple(text[i:]) for i in order]
    assert suffixes == sorted(suffixes)


def test_a_draft_follows_the_most_frequent_continuation_while_its_chance_holds():
    # After "1 2 3": "4 5" three times, "4 6" once, "7" once. The first token, 4, survives 4 times in 5 (0.8); then 5
    # in 3 of the 4 that agreed (0.8 × 0.75 = 0.6); the next position has nothing after 5 but the document's end.
    documents = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3, 7], [1, 2, 3, 4, 5]]
    index = StoredChatsIndex([((c, c * 10), d) for c, d in enumerate(documents)])
    draft = index.propose([9, 1, 2, 3], 8, RULES)
    assert draft.tokens == [4, 5] and draft.match == 3 and draft.from_text
    assert draft.origin == (4, 40)  # the most recent occurrence that agreed with the whole draft


def test_a_draft_stops_where_its_chance_to_survive_falls_below_the_minimum():
    # Ten different continuations of "1 2": each has a chance of 0.1 — at the minimum, so the most recent one is drafted
    # (what follows it agrees, 0.1 × 1, up to the match's length); with eleven, none is.
    ten = [[1, 2, 10 + i, 50, 51] for i in range(10)]
    draft = StoredChatsIndex([((0, i), d) for i, d in enumerate(ten)]).propose([1, 2], 8, RULES)
    assert draft.tokens == [19, 50] and draft.withheld == 0
    eleven = ten + [[1, 2, 30, 50]]
    draft = StoredChatsIndex([((0, i), d) for i, d in enumerate(eleven)]).propose([1, 2], 8, RULES)
    assert draft.tokens == []


def test_a_draft_is_at_most_as_long_as_its_match():
    index = StoredChatsIndex([((0, 0), list(range(1, 40)))])
    assert index.propose([5, 6, 7], 16, RULES).tokens == [8, 9, 10]
    assert len(index.propose(list(range(1, 20)), 16, RULES).tokens) == 16  # n_max bounds a long match
    assert index.propose([7], 16, RULES).tokens == []  # one matching token is too little


def test_a_forgotten_chat_drafts_nothing():
    shared = StoredChatsDrafter(StoredChatsIndex([((1, 10), [1, 2, 3, 4, 5]), ((2, 20), [1, 2, 3, 8, 9])]))
    assert shared.propose([1, 2, 3], 8, RULES).origin == (2, 20)
    shared.forget(Forgotten(2))
    assert shared.propose([1, 2, 3], 8, RULES).origin == (1, 10)
    shared.forget(Forgotten(1))
    assert shared.propose([1, 2, 3], 8, RULES).tokens == []
    assert shared.take_stale() == {1, 2} and shared.take_stale() == set()  # each chat's kept replies told once


def test_a_deleted_reply_drafts_nothing_and_the_rest_of_its_chat_still_does():
    shared = StoredChatsDrafter(StoredChatsIndex([((1, 10), [1, 2, 3, 4, 5]), ((1, 11), [1, 2, 3, 8, 9]), ((2, 20), [7, 7])]))
    assert shared.propose([1, 2, 3], 8, RULES).tokens == [8, 9]  # the newer reply first
    shared.forget(Forgotten(1, frozenset({11})))
    draft = shared.propose([1, 2, 3], 8, RULES)
    assert (draft.tokens, draft.origin) == ([4, 5], (1, 10))
    assert shared.take_stale() == {1}


def test_the_index_keeps_the_most_recent_replies_within_its_bound(monkeypatch):
    monkeypatch.setattr(stored_chats, "MAX_TOKENS", 25)
    index = StoredChatsIndex([((0, i), [i] * 10) for i in range(5)])
    assert index.origins == [(0, 3), (0, 4)] and index.tokens == 22
    assert index.propose([4, 4], 8, RULES).tokens == [4, 4]
    assert index.propose([1, 1], 8, RULES).tokens == []


def test_nothing_matches_across_two_replies():
    index = StoredChatsIndex([((0, 0), [1, 2]), ((0, 1), [3, 4, 5])])
    assert index.longest_match([1, 2, 3])[0] == 1  # "2 3" never occurred: a separator lies between them
    assert index.propose([9, 1, 2], 8, RULES).tokens == []  # nothing follows the first reply
