"""Bad input gets one clear line naming the problem and what to do: no traceback, no silent fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf_fixtures import smollm_tokens, write_variant, write_vocab_gguf
from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
from specchat.engine.core import Engine
from specchat.errors import ConfigError, IncompatibleDraftError, ModelError
from helpers import assert_one_clear_line, cli


def profile_file(tmp_path: Path, target: str, draft: str | None = None, *, n_ctx: int = 2048, method: str = "draft") -> Path:
    lines = ["[target]", f'model = "{target}"', f"n_ctx = {n_ctx}", "[draft]", f'method = "{method}"']
    if draft:
        lines.append(f'model = "{draft}"')
    path = tmp_path / "p.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def engine_for(target: Path, draft: Path | None = None) -> Engine:
    return Engine(EngineConfig(ModelSettings(target), ModelSettings(draft) if draft else None,
                               SpecConfig("draft" if draft else "none")))


def test_missing_gguf(tmp_path):
    with pytest.raises(ModelError, match="target model not found"):
        engine_for(tmp_path / "nope.gguf")
    result = cli("ask", "--profile", str(profile_file(tmp_path, str(tmp_path / "nope.gguf"), method="none")), "hi")
    assert_one_clear_line(result, "not found", "nope.gguf")


def test_file_that_is_not_gguf(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>404 not found</html>" * 100)
    with pytest.raises(ModelError, match="not a GGUF file"):
        engine_for(junk)


def test_truncated_gguf(tmp_path, target_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(target_path.read_bytes()[: 3 * 1024 * 1024])
    with pytest.raises(ModelError, match="truncated or corrupt"):
        engine_for(broken)
    result = cli("ask", "--profile", str(profile_file(tmp_path, str(broken), method="none")), "hi")
    assert_one_clear_line(result, "broken.gguf", "re-download")


def test_draft_with_a_different_vocabulary_is_refused(tmp_path, target_path):
    other = write_vocab_gguf(target_path, tmp_path / "other.gguf", [f"tok{i}" for i in range(300)])
    with pytest.raises(IncompatibleDraftError, match="vocabulary sizes differ by 48852"):
        engine_for(target_path, other)
    result = cli("ask", "--profile", str(profile_file(tmp_path, str(target_path), str(other))), "hi")
    assert_one_clear_line(result, "other.gguf", "cannot speculate", "vocabulary sizes differ")


def test_draft_with_one_different_token_is_refused(tmp_path, target_path):
    tokens = smollm_tokens(target_path)
    tokens[1000] = "definitely-not-the-same"
    other = write_vocab_gguf(target_path, tmp_path / "near.gguf", tokens)
    with pytest.raises(IncompatibleDraftError, match="token 1000 differs"):
        engine_for(target_path, other)


def test_draft_whose_tokenizer_appends_another_eos_is_refused(tmp_path, target_path):
    other = write_variant(target_path, tmp_path / "eos.gguf", header_only=True,
                          set_keys={"tokenizer.ggml.add_eos_token": True, "tokenizer.ggml.eos_token_id": 0})
    with pytest.raises(IncompatibleDraftError, match="EOS differs"):
        engine_for(target_path, other)


def test_context_too_small_for_the_prompt(tmp_path, target_path):
    result = cli("ask", "--profile", str(profile_file(tmp_path, str(target_path), n_ctx=64, method="none")),
                 "please summarise " * 40)
    assert_one_clear_line(result, "needs", "context holds 64", "raise n_ctx")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--n-max", "0"], "n_max = 0 is impossible: expected an integer from 1 to 256"),
        (["--temperature", "-1"], "temperature = -1.0 is impossible: expected a number from 0"),
        (["--max-tokens", "0"], "max_tokens must be ≥ 1"),
        (["--threads", "-2"], "threads = -2 is impossible"),
        (["--profile", "no-such-profile"], "unknown profile"),
        (["--profile", "ngram", "--method", "draft"], "method 'draft' needs [draft] model"),  # the profile names none
    ],
)
def test_impossible_parameters(args, fragment):
    assert_one_clear_line(cli("ask", *args, "hello"), fragment)


def test_draft_method_without_a_draft_model(tmp_path, target_path):
    result = cli("ask", "--profile", str(profile_file(tmp_path, str(target_path), method="draft")), "hi")
    assert_one_clear_line(result, "needs [draft] model")


def test_config_validation():
    with pytest.raises(ConfigError, match="n_min"):
        SpecConfig("draft", n_max=2, n_min=3)
    with pytest.raises(ConfigError, match="p_min"):
        SpecConfig("draft", p_min=1.5)
    with pytest.raises(ConfigError, match="unknown speculation method"):
        SpecConfig("magic")
