"""llama.cpp's lookup-cache files as specchat writes them from the stored replies (``backends.lookup_cache``),
checked against a layout worked out by hand from ``common_ngram_cache_save``: per n-gram its 4 token slots (-1 where
unused), the number of distinct next tokens, then (token, count) pairs, as 32-bit integers."""

from __future__ import annotations

import numpy as np

from specchat.backends.lookup_cache import DYNAMIC, STATIC, lookup_cache, read_lookup_cache, write_lookup_caches


def test_the_static_cache_of_a_worked_example(tmp_path):
    # Two documents: 1 2 3 1 2 4 and 1 2 3. Their 2-grams and what follows each, counted over both, none across them:
    # (1 2) → 3 twice, 4 once; (2 3) → 1 once; (3 1) → 2 once.
    data = lookup_cache([[1, 2, 3, 1, 2, 4], [1, 2, 3]], STATIC)
    records = {tuple(data[i: i + 5]) for i in (0, 9, 16)}  # 5 + 2·2, 5 + 2·1, 5 + 2·1 integers
    assert len(data) == 9 + 7 + 7 and data.dtype == np.int32
    assert (1, 2, -1, -1, 2) in records and (2, 3, -1, -1, 1) in records and (3, 1, -1, -1, 1) in records
    at = next(i for i in (0, 9, 16) if tuple(data[i: i + 2]) == (1, 2))
    assert sorted(zip(data[at + 5: at + 9: 2], data[at + 6: at + 9: 2])) == [(3, 2), (4, 1)]
    path = tmp_path / "static.bin"
    data.tofile(path)
    assert read_lookup_cache(path) == {(1, 2): {3: 2, 4: 1}, (2, 3): {1: 1}, (3, 1): {2: 1}}


def test_the_dynamic_cache_holds_every_ngram_of_one_to_four_tokens(tmp_path):
    static, dynamic = write_lookup_caches([[5, 6, 5, 6, 7]], tmp_path)
    assert read_lookup_cache(static) == {(5, 6): {5: 1, 7: 1}, (6, 5): {6: 1}}
    assert read_lookup_cache(dynamic) == {
        (5,): {6: 2}, (6,): {5: 1, 7: 1},
        (5, 6): {5: 1, 7: 1}, (6, 5): {6: 1},
        (5, 6, 5): {6: 1}, (6, 5, 6): {7: 1},
        (5, 6, 5, 6): {7: 1},
    }
    assert DYNAMIC == (1, 2, 3, 4) and not list(tmp_path.glob("*.part"))  # written whole, then renamed


def test_no_documents_write_empty_caches_a_server_can_load(tmp_path):
    static, dynamic = write_lookup_caches([[], [9]], tmp_path)
    assert static.stat().st_size == 0 and read_lookup_cache(static) == {}
    assert read_lookup_cache(dynamic) == {}
