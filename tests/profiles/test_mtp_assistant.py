"""The seeds' second route as it really runs (issue #48): Gemma 4's MTP is a separate assistant GGUF
(``gemma4_assistant``) passed to llama-server as the draft model with ``--spec-type draft-mtp``; Qwen3.5/3.6 carry their
MTP heads in the target (``nextn_predict_layers``) and need none. GGUF headers written for the purpose: the profile's
resolution, the planner and the compatibility check read headers only."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from helpers import cli
from specchat import profiles
from specchat.backends.server_flags import server_args
from specchat.errors import ConfigError

pytestmark = pytest.mark.usefixtures("isolated_user_dirs")


def header(path: Path, arch: str, **keys: int) -> Path:
    """A GGUF with ``arch``'s header and one tiny tensor: what llama.cpp's planner and specchat's checks read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(keys.pop("block_count", 4))
    writer.add_embedding_length(256)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    for key, value in keys.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_tensor("token_embd.weight", gguf.np.zeros((4, 4), dtype=gguf.np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def mtp_profile(folder: Path, target: Path, assistant: str | None = None) -> Path:
    named = f'model = "{assistant}"\n' if assistant else ""
    path = folder / "mtp.toml"
    path.write_text(f'[target]\nmodel = "{target}"\n[draft]\nmethod = "mtp"\n{named}n_max = 2\n'
                    '[backend]\nkind = "llama-server"\nspec_type = "draft-mtp"\n', encoding="utf-8")
    return path


def test_a_gemma_4_target_drafts_with_the_assistant_found_in_its_mtp_folder(tmp_path):
    models = tmp_path / "lmstudio" / "google"
    target = header(models / "gemma-4-12b-it-qat-Q4_0.gguf", "gemma4")
    header(models / "gemma-3-1b-it-Q4_0.gguf", "gemma3")  # another model beside it: not an assistant
    assistant = header(models / "MTP" / "gemma-4-12B-it-assistant.gguf", "gemma4_assistant")
    config = profiles.run_config(profiles.load_profile(str(mtp_profile(tmp_path, target))))
    assert config.draft is not None and config.draft.path == assistant
    args = server_args(config)
    assert args[args.index("--spec-type") + 1] == "draft-mtp" and args[args.index("-md") + 1] == str(assistant)
    checked = cli("profiles", "check", str(mtp_profile(tmp_path, target))).stdout
    assert f"✓ the assistant {assistant} drafts" in checked and "gemma-4-12B-it-assistant.gguf" in checked


def test_a_named_assistant_is_the_one_used(tmp_path):
    target = header(tmp_path / "m" / "gemma-4-12b-it-qat-Q4_0.gguf", "gemma4")
    chosen = header(tmp_path / "elsewhere" / "my-assistant.gguf", "gemma4_assistant")
    config = profiles.run_config(profiles.load_profile(str(mtp_profile(tmp_path, target, str(chosen)))))
    assert config.draft.path == chosen


def test_a_target_without_heads_or_assistant_is_one_line_saying_what_to_get(tmp_path):
    target = header(tmp_path / "m" / "gemma-4-12b-it-qat-Q4_0.gguf", "gemma4")
    with pytest.raises(ConfigError) as err:
        profiles.run_config(profiles.load_profile(str(mtp_profile(tmp_path, target))))
    message = str(err.value)
    assert "no MTP heads of its own" in message and "gemma4_assistant" in message and "\n" not in message
    checked = cli("profiles", "check", str(mtp_profile(tmp_path, target)))
    assert checked.returncode == 1 and "✗ gemma-4-12b-it-qat-Q4_0.gguf has no MTP heads of its own" in checked.stdout
    asked = cli("ask", "--profile", str(mtp_profile(tmp_path, target)), "Hi")
    lines = [line for line in asked.stderr.splitlines() if line.strip()]
    assert asked.returncode == 2 and len(lines) == 1 and "no MTP heads of its own" in lines[0]


def test_a_target_with_its_own_heads_needs_no_assistant(tmp_path):
    target = header(tmp_path / "m" / "Qwen3.5-9B-Q4_K_M.gguf", "qwen35", nextn_predict_layers=1)
    config = profiles.run_config(profiles.load_profile(str(mtp_profile(tmp_path, target))))
    args = server_args(config)
    assert config.draft is None and "-md" not in args and args[args.index("--spec-type") + 1] == "draft-mtp"
    assert "✓ MTP heads inside the target draft" in cli("profiles", "check", str(mtp_profile(tmp_path, target))).stdout


def test_the_bundled_gemma_profiles_name_their_assistant():
    for name in ("gemma4-12b-qat-mtp", "server-draft-mtp"):
        draft = profiles.load_profile(name).values["draft"]
        assert draft["method"] == "mtp" and "assistant" in draft["model"]
