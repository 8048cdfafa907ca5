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


def write_scrambled_copy(source: Path, destination: Path) -> Path:
    """A loadable, vocabulary-compatible copy of ``source`` whose token embeddings are reversed row by row.

    The output layer is tied to the embeddings in SmolLM2, so the copy reads and writes a permuted vocabulary:
    a real llama.cpp model whose drafts the original target (almost) never accepts.
    """
    reader = gguf.GGUFReader(str(source))
    embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = np.array(embedding.data)  # (n_vocab, bytes per row), a copy of the memory-mapped data
    offset = int(embedding.data_offset)
    del reader
    data = bytearray(source.read_bytes())
    data[offset : offset + rows.nbytes] = rows[::-1].tobytes()
    destination.write_bytes(bytes(data))
    return destination
