"""The stored replies as llama.cpp's lookup caches, for a llama-server whose spec type is ``ngram-cache``.

llama.cpp's ``ngram-cache`` drafts from three n-gram tables (``common/ngram-cache.cpp``): the conversation's own, a
*dynamic* one (n-grams of 1 to 4 tokens, ``--lookup-cache-dynamic``, held to stricter counts) and a *static* one
(2-token n-grams, ``--lookup-cache-static``, which weighs the others' candidates and drafts alone where they have
none). specchat writes both from the same documents its own index over earlier chats holds (each stored reply with
its question's tail, ``engine.drafters.stored_chats.documents_of``), in the file format of llama.cpp's
``common_ngram_cache_save`` and ``common_ngram_cache_load``: per n-gram its ``LLAMA_NGRAM_MAX`` (4) token slots, unused ones -1, the number
of distinct tokens that followed it, then each (token, count) — 32-bit integers in the machine's byte order. No
n-gram runs across two documents.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..engine.drafters.stored_chats import StoredChats, cached_documents, lowest_priority
from ..engine.llama import Model
from ..errors import SpecchatError

if TYPE_CHECKING:
    from ..engine.chat_template import ChatTemplate

NGRAM_MAX = 4  # LLAMA_NGRAM_MAX: the token slots of every n-gram in the file
STATIC = (2,)  # LLAMA_NGRAM_STATIC
DYNAMIC = (1, 2, 3, 4)  # LLAMA_NGRAM_MIN .. LLAMA_NGRAM_MAX, as the server's dynamic cache is updated
NULL = -1  # LLAMA_TOKEN_NULL


def lookup_cache(documents: Iterable[Sequence[int]], sizes: Sequence[int]) -> np.ndarray:
    """The cache's file contents as 32-bit integers: for every n-gram of ``sizes`` tokens in the documents, the counts
    of the tokens that followed it. One size at a time, in 32-bit rows: four million stored tokens take about 80 MB
    while a size is counted."""
    docs = [np.asarray(d, dtype=np.int32) for d in documents]
    parts = []
    for n in sizes:
        windows = [np.lib.stride_tricks.sliding_window_view(d, n + 1) for d in docs if len(d) > n]
        if windows:
            # each n-gram with the token after it, counted; sorted, so each n-gram's rows lie together
            rows, counts = np.unique(np.concatenate(windows), axis=0, return_counts=True)
            parts.append(_records(rows[:, :n], rows[:, n], counts))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _records(ngrams: np.ndarray, following: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sorted (n-gram, following token, count) rows as the file's records: the n-gram's 4 slots, how many distinct
    tokens follow it, then (token, count) for each."""
    first = np.ones(len(ngrams), dtype=bool)
    first[1:] = np.any(ngrams[1:] != ngrams[:-1], axis=1)
    starts = np.flatnonzero(first)
    distinct = np.diff(np.append(starts, len(ngrams)))
    record = NGRAM_MAX + 1 + 2 * distinct
    at = np.concatenate(([0], np.cumsum(record)[:-1]))
    out = np.full(int(record.sum()), NULL, dtype=np.int32)
    for j in range(ngrams.shape[1]):
        out[at + j] = ngrams[starts, j]
    out[at + NGRAM_MAX] = distinct
    group = np.repeat(np.arange(len(starts)), distinct)
    pair_at = at[group] + NGRAM_MAX + 1 + 2 * (np.arange(len(ngrams)) - starts[group])
    out[pair_at] = following
    out[pair_at + 1] = counts
    return out


def write_lookup_caches(documents: Iterable[Sequence[int]], folder: Path) -> tuple[Path, Path]:
    """The static and the dynamic cache of ``documents`` in ``folder``; their paths (written whole, then renamed, so a
    server never reads half a file)."""
    docs = list(documents)
    written = []
    for name, sizes in (("static", STATIC), ("dynamic", DYNAMIC)):
        path = folder / f"lookup-{name}.bin"
        partial = path.with_suffix(".part")
        lookup_cache(docs, sizes).tofile(partial)
        partial.chmod(0o600)  # n-grams of the user's chats: the owner's alone
        partial.replace(path)
        written.append(path)
    return written[0], written[1]


def read_lookup_cache(path: Path) -> dict[tuple[int, ...], dict[int, int]]:
    """A cache file read back as ``common_ngram_cache_load`` reads it (what the tests compare with worked examples)."""
    data = np.fromfile(path, dtype=np.int32).tolist()
    cache: dict[tuple[int, ...], dict[int, int]] = {}
    i = 0
    while i < len(data):
        ngram = tuple(t for t in data[i: i + NGRAM_MAX] if t != NULL)
        n = data[i + NGRAM_MAX]
        i += NGRAM_MAX + 1
        cache[ngram] = {data[i + 2 * k]: data[i + 2 * k + 1] for k in range(n)}
        i += 2 * n
    return cache


class LookupCacheBuilder:
    """Writes the lookup caches of the stored replies into ``folder`` (its own: a build never writes another's files)
    on a thread of its own, at the lowest priority, tokenizing with a vocabulary of its own (loaded here, on the
    caller's thread, as ``StoredChatsIndexBuilder``'s is) through the token cache the in-process index keeps. ``done`` is set
    when it ends: ``files`` then holds the caches' paths, or ``problem`` why there are none. The replies of a
    ``forgotten`` conversation are left out; a build ``cancel``led (a newer one replaces it) writes nothing."""

    def __init__(self, read: StoredChats, model_path: Path, target_id: str,
                 template: ChatTemplate, token_cache: Path, folder: Path, forgotten: frozenset[int]) -> None:
        self.model_path, self.folder = model_path, folder
        self.files: tuple[Path, Path] | None = None
        self.problem = ""
        self.done = threading.Event()
        self._cancelled = threading.Event()
        try:
            vocab = Model(model_path, vocab_only=True)
        except SpecchatError as exc:  # the target's file went away since it loaded
            self.problem = f"earlier chats are not drafted from: {exc}"
            self.done.set()
            return
        threading.Thread(target=self._build, name="lookup caches", daemon=True,
                         args=(read, vocab, target_id, template, token_cache, forgotten)).start()

    def cancel(self) -> None:
        self._cancelled.set()

    def _build(self, read: StoredChats, vocab: Model, target_id: str, template: ChatTemplate,
               token_cache: Path, forgotten: frozenset[int]) -> None:
        lowest_priority()
        try:
            documents = cached_documents(lambda: (r for r in read() if r.origin[0] not in forgotten), vocab, target_id,
                                         template, token_cache, lambda: None)
            if not self._cancelled.is_set():
                self.files = write_lookup_caches([tokens for _, tokens in documents], self.folder)
        except Exception as exc:  # noqa: BLE001 — a thread's failure must reach the screen as a line, not a traceback
            self.problem = f"earlier chats are not drafted from: {exc}"
        finally:
            self.done.set()


def cache_args(files: tuple[Path, Path] | None) -> list[str]:
    """llama-server's flags for the caches (none without them)."""
    if files is None:
        return []
    static, dynamic = files
    return ["--lookup-cache-static", str(static), "--lookup-cache-dynamic", str(dynamic)]
