"""The replies of the user's earlier chats, indexed for drafting (the "suffix" method, after SuffixDecoding).

Every stored reply is one document: the last ``PROMPT_TAIL`` tokens of its question as the chat template renders it
for the target, then the reply's tokens (as the target generated them when it was this target, else its text
tokenized). Documents are laid end to end with a separator no token equals, and a suffix array over the *reversed*
tokens finds, for the end of the conversation, the longest stretch that occurred before and every place it occurred:
extending a match one token further back narrows a range of the array.

What follows the occurrences is scored by frequency, as SuffixDecoding scores its suffix tree: the draft takes at each
position the token most of the still-agreeing occurrences continue with, its probability the share of them that do,
and stops when the running product (the chance that the whole draft so far survives) falls below ``MIN_PROBABILITY``
or the draft grows longer than ``LENGTH_FACTOR`` times the match (a short match is weak evidence).

Memory is bounded: ``MAX_TOKENS`` tokens at most, the most recent replies kept — 4 bytes each for the tokens, the
reversed copy and the suffix array, about 48 MB at the bound once built. While it builds, the tokens of every stored
reply are held as lists and the sort holds several 8-byte arrays of the indexed length (about 250 MB at the bound, for
the seconds it takes), and the old index stays in use until the new one replaces it. Built off the engine's thread (``StoredChatsIndexBuilder``), so
the first token never waits for it; until it is built the method drafts from the conversation alone.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import SpecchatError
from ..conversation import Forgotten
from ..llama import Model
from .base import NO_DRAFT, Draft
from .stored_chats_cache import TokenCache, digest

if TYPE_CHECKING:
    from ..chat_template import ChatTemplate
    from ..rules import Rules

Origin = tuple[int, int]  # (conversation id, message id) of a stored reply: what the front end can show and forget

SEPARATOR = -1  # between documents: no token equals it, so no match runs across two replies
PAD = -2  # beyond the end of the reversed tokens, below every token and the separator as the array sorts them
MAX_MATCH = 64  # how far back a match is followed: the suffix array is sorted this deep
PROMPT_TAIL = 32  # tokens of each reply's question kept, so a question asked again finds its earlier answer
MAX_TOKENS = 4_000_000  # the most tokens indexed (the most recent replies)
OCCURRENCES = 64  # occurrences of a match that vote on the draft: the most recent ones
MIN_PROBABILITY = 0.1  # SuffixDecoding's min_token_prob: a draft stops where its chance to survive falls below this
LENGTH_FACTOR = 1.0  # SuffixDecoding's max_spec_factor: a draft is at most this many times as long as its match
MIN_MATCH = 2  # a single matching token says too little to draft from
FEW = 64  # occurrences few enough to follow all at once rather than narrow token by token


@dataclass(frozen=True, slots=True)
class StoredReply:
    """One earlier reply as the front end read it from the chats store."""

    origin: Origin
    question: str  # the user message it answered
    reply: str
    tokens: tuple[int, ...] | None = None  # the reply's token ids, when the target that generated them is known
    target_id: str | None = None  # that target's identity (``llama.model_identity``)


StoredChats = Callable[[], Iterable[StoredReply]]  # reads the stored replies anew each time it is called


@dataclass
class StoredChatsDrafter:
    """The engine's index over earlier chats, shared by every configuration of one target (as the n-gram drafter's
    memory is). ``index`` is swapped in whole when a build ends, so the step loop reads one index or the other, never
    half of one; ``forget`` may be called from any thread."""

    index: StoredChatsIndex | None = None
    forgotten: set[int] = field(default_factory=set)  # conversation ids deleted or made private since the build
    forgotten_replies: set[Origin] = field(default_factory=set)  # stored replies deleted since the build
    problem: str = ""  # why the last build failed, when it did
    # Chats forgotten whose replies this process may still keep for drafting (the n-gram drafter's): they go at the
    # next reply (``Engine.reply``, on the engine's thread).
    stale: set[int] = field(default_factory=set)

    def forget(self, what: Forgotten) -> None:
        if what.messages is None:
            self.forgotten.add(what.chat)
        else:
            self.forgotten_replies.update((what.chat, message) for message in what.messages)
        self.stale.add(what.chat)

    def take_stale(self) -> set[int]:
        """The chats whose kept replies are to go now (each told once)."""
        stale, self.stale = self.stale, set()
        return stale

    def propose(self, seq: Sequence[int], budget: int, rules: Rules) -> Draft:
        index = self.index
        if index is None:
            return NO_DRAFT
        return index.propose(seq, budget, rules, lambda origin: origin[0] in self.forgotten
                             or origin in self.forgotten_replies)


class StoredChatsIndex:
    def __init__(self, documents: Sequence[tuple[Origin, Sequence[int]]],
                 between: Callable[[], None] = lambda: None) -> None:
        """``between``: called between the passes of the sort (the builder waits there while a reply runs)."""
        kept, total = [], 0
        for origin, tokens in reversed(documents):  # the most recent first, until the bound
            if total + len(tokens) + 1 > MAX_TOKENS:
                break
            kept.append((origin, tokens))
            total += len(tokens) + 1
        kept.reverse()
        # Separators after the end too: a draft read past the last reply reads one, and stops.
        text = np.full(total + MAX_MATCH, SEPARATOR, dtype=np.int32)
        starts, at = [], 0
        for _, tokens in kept:
            text[at + 1: at + 1 + len(tokens)] = tokens
            starts.append(at + 1)
            at += len(tokens) + 1
        self.text, self._end = text, total
        self.starts = np.asarray(starts, dtype=np.int64)
        self.origins = [origin for origin, _ in kept]
        self.documents = len(kept)
        reversed_text = np.full(total + MAX_MATCH + 1, PAD, dtype=np.int32)
        reversed_text[:total] = text[:total][::-1]
        self._reversed = reversed_text
        self._array = suffix_array(reversed_text[:total], MAX_MATCH, between).astype(np.int32)
        # Where the suffixes that begin with each token begin in the array (sorted by that token first): a match's
        # first narrowing is a lookup, not a search.
        counts = np.bincount(text[:total][text[:total] >= 0], minlength=1) if total else np.zeros(1, dtype=np.int64)
        self._by_first = np.concatenate(([0], np.cumsum(counts))) + (self.documents if total else 0)

    @property
    def tokens(self) -> int:
        return self._end

    @property
    def nbytes(self) -> int:
        return self.text.nbytes + self._reversed.nbytes + self._array.nbytes + self._by_first.nbytes

    def longest_match(self, seq: Sequence[int]) -> tuple[int, int, int]:
        """How many tokens at the end of ``seq`` occurred before (at most ``MAX_MATCH``), and the range of the suffix
        array holding every occurrence."""
        if not len(self._array) or not seq:
            return 0, 0, 0
        last = seq[-1]
        if not 0 <= last < len(self._by_first) - 1:
            return 0, 0, 0
        lo, hi = int(self._by_first[last]), int(self._by_first[last + 1])
        if lo == hi:
            return 0, 0, 0
        deepest = min(MAX_MATCH, len(seq))
        pattern = np.asarray(seq[len(seq) - deepest:][::-1], dtype=np.int32)  # the conversation read backwards
        for j in range(1, deepest):
            if hi - lo <= FEW:  # few occurrences left: how far each goes on agreeing, all at once
                rows = self._reversed[self._array[lo:hi, None] + np.arange(j, deepest)]
                agree = np.logical_and.accumulate(rows == pattern[j:], axis=1).sum(axis=1)
                best = int(agree.max())
                # Those that agree furthest share the longest prefix: they lie next to each other in the array.
                (where,) = np.nonzero(agree == best)
                return j + best, lo + int(where[0]), lo + int(where[-1]) + 1
            new_lo, new_hi = self._narrow(lo, hi, j, pattern[j])
            if new_lo == new_hi:
                return j, lo, hi
            lo, hi = new_lo, new_hi
        return deepest, lo, hi

    def _narrow(self, lo: int, hi: int, j: int, token: np.int32) -> tuple[int, int]:
        """The part of ``[lo, hi)`` whose suffixes hold ``token`` at offset ``j`` (they agree before it, so it is
        sorted there). ``token`` is of the keys' type: a Python int would have them converted first."""
        if hi - lo <= 4096:
            keys = self._reversed[self._array[lo:hi] + j]
            return lo + int(np.searchsorted(keys, token, "left")), lo + int(np.searchsorted(keys, token, "right"))
        array, text = self._array, self._reversed
        a, b = lo, hi
        while a < b:  # the first suffix whose token at j is not below ``token``
            mid = (a + b) // 2
            if text[array[mid] + j] < token:
                a = mid + 1
            else:
                b = mid
        start, b = a, hi
        while a < b:  # the first suffix whose token at j is above it
            mid = (a + b) // 2
            if text[array[mid] + j] <= token:
                a = mid + 1
            else:
                b = mid
        return start, a

    def follows(self, lo: int, hi: int, forgotten: Callable[[Origin], bool]) -> list[int]:
        """Where the text after each occurrence in ``[lo, hi)`` begins, newest first: the most recent
        ``OCCURRENCES`` (of an evenly spread sample, for a stretch that occurred thousands of times); those in a
        ``forgotten`` reply are left out."""
        positions = self._array[lo:hi]
        if len(positions) > OCCURRENCES * 64:  # a very common stretch: a spread sample stands for it
            positions = positions[:: len(positions) // (OCCURRENCES * 64)]
        if len(positions) > OCCURRENCES:
            positions = np.partition(positions, OCCURRENCES)[:OCCURRENCES]
        total = self._end
        follows = sorted((total - int(p) for p in positions if p >= 1), reverse=True)  # the match ends before
        return [f for f in follows if not forgotten(self.origin_at(f))]

    def origin_at(self, position: int) -> Origin:
        return self.origins[int(np.searchsorted(self.starts, position, "right")) - 1]

    def propose(self, seq: Sequence[int], budget: int, rules: Rules,
                forgotten: Callable[[Origin], bool] = lambda _origin: False) -> Draft:
        match, lo, hi = self.longest_match(seq)
        if match < MIN_MATCH:
            return NO_DRAFT
        follows = self.follows(lo, hi, forgotten)
        limit = min(budget, max(1, int(match * LENGTH_FACTOR)), MAX_MATCH)  # the text is padded MAX_MATCH deep
        if not follows or limit < 1:
            return NO_DRAFT
        text = self.text
        # What follows each occurrence, newest first, one row each (a separator where its reply ends).
        rows = text[np.asarray(follows)[:, None] + np.arange(limit)].tolist()
        tokens: list[int] = []
        chances: list[float] = []
        survival = 1.0
        alive = list(range(len(rows)))
        while len(tokens) < limit:
            i = len(tokens)
            # Counted in the order first seen: ``alive`` is newest first, so a tie goes to the most recent occurrence.
            counts: dict[int, int] = {}
            for r in alive:
                if (token := rows[r][i]) != SEPARATOR:
                    counts[token] = counts.get(token, 0) + 1
            if not counts:
                break
            best = max(counts, key=counts.__getitem__)  # the first of the most frequent continuations
            chance = survival * counts[best] / len(alive)
            if chance < MIN_PROBABILITY:
                break  # (not counted as withheld: that counts the profile's p_min)
            survival = chance
            tokens.append(best)
            chances.append(chance)
            alive = [r for r in alive if rows[r][i] == best]
            if rules.vocab.is_eog(best):
                break
        if not tokens:
            return NO_DRAFT
        source = follows[alive[0]]  # the most recent occurrence that agreed with the whole draft
        copied = [int(t) for t in text[max(source - match, 0): source + len(tokens)]] if rules.top else None
        return Draft(tokens, match=match, copied=copied, from_text=True, origin=self.origin_at(source),
                     survival=tuple(chances))


def suffix_array(text: np.ndarray, depth: int, between: Callable[[], None] = lambda: None) -> np.ndarray:
    """The suffixes of ``text`` sorted by their first ``depth`` tokens (prefix doubling: each pass sorts by twice as
    many, from the ranks of the last), a suffix that ends sooner first."""
    n = len(text)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rank = text.astype(np.int64) - PAD + 1  # ranks from 1: 0 is "beyond the end"
    order = np.argsort(rank, kind="stable")
    span = 1
    while span < depth:
        between()
        second = np.zeros(n, dtype=np.int64)
        second[: n - span] = rank[span:]
        order = np.lexsort((second, rank))
        first_sorted, second_sorted = rank[order], second[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        new[1:] = (first_sorted[1:] != first_sorted[:-1]) | (second_sorted[1:] != second_sorted[:-1])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(new)
        if rank[order[-1]] == n:  # every suffix told apart: deeper passes change nothing
            break
        span *= 2
    return order


Tokenize = Callable[[str], list[int]]


def lowest_priority() -> None:
    """The calling thread at nice 19, where the system allows it (Linux sets a thread's own with its id)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def document_key(stored: StoredReply, target_id: str, template: ChatTemplate) -> tuple[int, str, tuple[int, ...] | None]:
    """What a reply is cached by (``stored_chats_cache.digest``), its question as the template renders it, and its token
    ids when they are this target's."""
    ids = stored.tokens if stored.tokens and stored.target_id == target_id else None
    rendered = template.render([{"role": "user", "content": stored.question}], add_generation_prompt=True)
    return digest(f"{PROMPT_TAIL}|{rendered}", stored.reply, ids), rendered, ids


def documents_of(replies: Iterable[StoredReply], target_id: str, template: ChatTemplate, tokenize: Tokenize,
                 between: Callable[[], None], cache: TokenCache) -> list[tuple[Origin, list[int]]]:
    """Each reply as the tokens it is indexed by: its question's tail as the template renders it, then the reply (as
    the target generated it, when it was this target). ``between`` is called before each reply."""
    documents = []
    for stored in replies:
        between()
        key, rendered, ids = document_key(stored, target_id, template)
        tokens = cache.get(key)
        if tokens is None:
            question = tokenize(rendered)[-PROMPT_TAIL:]
            reply = list(ids) if ids is not None else tokenize(stored.reply)
            tokens = question + reply if reply else []
            cache.put(key, tokens)
        if tokens:
            documents.append((stored.origin, tokens))
    return documents


def cached_documents(read: StoredChats, vocab: Model, target_id: str, template: ChatTemplate,
                     cache_path: Path, between: Callable[[], None]) -> list[tuple[Origin, list[int]]]:
    """Every stored reply ``read`` yields as the tokens it is indexed by (``documents_of``), tokenized with ``vocab`` —
    freed here — where the token cache at ``cache_path`` does not hold them; the cache is then saved with only what
    was used."""
    cache = TokenCache(cache_path)
    try:
        documents = documents_of(read(), target_id, template, lambda text: vocab.tokenize(text, add_special=False),
                                 between, cache)
    finally:
        vocab.close()
    cache.save()
    return documents


class _Stopped(Exception):
    """The build was stopped (``StoredChatsIndexBuilder.stop``)."""


class StoredChatsIndexBuilder:
    """Builds a ``StoredChatsDrafter``'s index on a thread of its own, tokenizing with a vocabulary-only load of the target (so the
    engine's model can be freed while it runs), and swaps it in when done.

    It works only while the engine is ``idle`` (between replies), at the lowest priority: on this 2-core machine a
    reply beside a build of ten thousand stored messages ran at 36 tok/s against 124 alone, its first token 523 ms
    against 217 (benchmarks/history_index.py). A reply that starts mid-build waits at most for one reply's tokens or
    one pass of the sort to finish."""

    def __init__(self, drafter: StoredChatsDrafter, read: StoredChats, model_path: Path,
                 target_id: str, template: ChatTemplate, cache: Path, idle: threading.Event) -> None:
        """Loads the target's vocabulary here, on the caller's thread (llama.cpp's load keeps its errors in one
        process-wide list: a second thread loading beside the engine's could mix them up); the thread frees it."""
        self._stop = threading.Event()
        self._idle = idle
        self._thread: threading.Thread | None = None
        try:
            vocab = Model(model_path, vocab_only=True)
        except SpecchatError as exc:  # the target's file went away since it loaded: one line, no index
            drafter.problem = f"earlier chats are not drafted from: {exc}"
            return
        self._thread = threading.Thread(target=self._build, name="stored chats index", daemon=True,
                                        args=(drafter, read, vocab, target_id, template, cache))
        self._thread.start()

    def _build(self, drafter: StoredChatsDrafter, read: StoredChats, vocab: Model, target_id: str,
               template: ChatTemplate, cache_path: Path) -> None:
        lowest_priority()
        try:
            documents = cached_documents(read, vocab, target_id, template, cache_path, self._between)
            index = StoredChatsIndex(documents, self._between)
            self._between()
        except _Stopped:
            return
        except Exception as exc:  # noqa: BLE001 — a thread's failure must reach the screen as a line, not a traceback
            drafter.problem = f"earlier chats are not drafted from: {exc}"
            return
        drafter.index = index

    def _between(self) -> None:
        """Wait while a reply runs; stop when told to."""
        while not self._idle.wait(0.05) and not self._stop.is_set():
            pass
        if self._stop.is_set():
            raise _Stopped

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop building before the next reply it reads (the index in place stays). Not waited for: the thread tokenizes with a
        vocabulary of its own, so the engine may free its models at once, and a suffix array being sorted (seconds,
        for millions of tokens) is simply dropped when done."""
        self._stop.set()
