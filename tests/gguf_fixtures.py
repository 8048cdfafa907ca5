"""Small GGUF files written with the ``gguf`` package: vocabularies to test compatibility rules, and broken files."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from specchat.engine.gguf_header import read_metadata


def write_vocab_gguf(path: Path, tokens: list[str], *, model: str = "gpt2", bos: int = 1, eos: int = 2,
                     add_bos: bool = False) -> Path:
    """A GGUF with a tokenizer header and one tiny tensor: enough for header checks, not a loadable model."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(add_bos)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def smollm_tokens(target: Path) -> list[str]:
    return list(read_metadata(target)["tokenizer.ggml.tokens"])
