"""GGUF files derived from the bundled model with the ``gguf`` package: other vocabularies, headers, broken files.

Every fixture starts from the real SmolLM2 file, so llama.cpp reads it as it reads a real model; only the parts a test
is about are changed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from specchat.engine.gguf_header import read_metadata

Q8_0_BLOCK_BYTES = 34  # an f16 scale, then 32 int8 weights


def _fields(reader: gguf.GGUFReader) -> dict[str, tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """Every metadata key of a GGUF as (value, type, array item type)."""
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            item = field.types[-1]
            if item == gguf.GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                value = [field.parts[i][0].item() for i in field.data]
            out[name] = (value, vtype, item)
        elif vtype == gguf.GGUFValueType.STRING:
            out[name] = (bytes(field.parts[-1]).decode("utf-8"), vtype, None)
        else:
            out[name] = (field.parts[-1][0].item(), vtype, None)
    return out


def _scaled_q8_rows(rows: np.ndarray, factor: float) -> np.ndarray:
    """Q8_0 rows with every block's scale multiplied: the dequantized row times ``factor``."""
    blocks = rows.copy().reshape(rows.shape[0], -1, Q8_0_BLOCK_BYTES)
    scales = blocks[:, :, :2].copy().view(np.float16) * np.float16(factor)
    blocks[:, :, :2] = scales.view(np.uint8)
    return blocks.reshape(rows.shape)


@functools.lru_cache(maxsize=4)
def _parsed(source: Path) -> tuple[gguf.GGUFReader, str, dict[str, tuple]]:
    """``source`` read once a run: parsing its ~49k token strings again took most of each variant's time."""
    reader = gguf.GGUFReader(str(source))
    return reader, bytes(reader.fields["general.architecture"].parts[-1]).decode(), _fields(reader)


def write_variant(source: Path, destination: Path, *, set_keys: dict[str, Any] | None = None,
                  drop_keys: tuple[str, ...] = (), tokens: list[str] | None = None,
                  extra_tokens: dict[str, int] | None = None, drop_tokens: int = 0, header_only: bool = False) -> Path:
    """A copy of ``source`` with metadata changed and, optionally, the vocabulary grown or shrunk at its end.

    ``extra_tokens`` maps new token texts to the id of an existing token whose embedding row they copy, scaled up a
    little: SmolLM2's output layer is tied to its embeddings, so the new token outscores the original wherever that
    would have been chosen; ``tokens`` replaces the whole vocabulary (header only). ``header_only`` writes one tiny tensor instead of the weights: enough for llama.cpp to
    read the vocabulary (``vocab_only``), not to run the model.
    """
    reader, arch, parsed = _parsed(source)
    fields = dict(parsed)  # the token lists are copied below before they change; nothing else is changed in place
    if tokens is not None:
        token_type = [1] * len(tokens)
    else:
        tokens, token_type = list(fields["tokenizer.ggml.tokens"][0]), list(fields["tokenizer.ggml.token_type"][0])
    if drop_tokens:
        del tokens[-drop_tokens:], token_type[-drop_tokens:]
    for text in extra_tokens or {}:
        tokens.append(text)
        token_type.append(1)
    fields["tokenizer.ggml.tokens"] = (tokens, *fields["tokenizer.ggml.tokens"][1:])
    fields["tokenizer.ggml.token_type"] = (token_type, *fields["tokenizer.ggml.token_type"][1:])
    vocab_key = f"{arch}.vocab_size"
    if vocab_key in fields:
        fields[vocab_key] = (len(tokens), *fields[vocab_key][1:])
    for key in drop_keys:
        fields.pop(key, None)
    for key, value in (set_keys or {}).items():
        old = fields.get(key)
        if old is not None:
            fields[key] = (value, *old[1:])
        elif isinstance(value, bool):
            fields[key] = (value, gguf.GGUFValueType.BOOL, None)
        elif isinstance(value, int):
            fields[key] = (value, gguf.GGUFValueType.UINT32, None)
        else:
            fields[key] = (value, gguf.GGUFValueType.STRING, None)

    writer = gguf.GGUFWriter(str(destination), arch)
    for key, (value, vtype, item) in fields.items():
        writer.add_key_value(key, value, vtype, sub_type=item)
    if header_only:
        writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    else:
        for tensor in reader.tensors:
            data = np.array(tensor.data)
            if tensor.name == "token_embd.weight":
                assert tensor.tensor_type == gguf.GGMLQuantizationType.Q8_0
                if drop_tokens:
                    data = data[:-drop_tokens]
                if extra_tokens:
                    copies = _scaled_q8_rows(data[list(extra_tokens.values())], 1.25)
                    data = np.concatenate([data, copies])
            writer.add_tensor(tensor.name, data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return destination


def write_vocab_gguf(source: Path, path: Path, tokens: list[str], **set_keys: Any) -> Path:
    """A header-only GGUF with ``source``'s tokenizer settings but the vocabulary ``tokens`` (and keys changed)."""
    return write_variant(source, path, tokens=tokens, set_keys=set_keys, header_only=True)


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
