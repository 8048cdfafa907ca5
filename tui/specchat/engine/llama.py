"""Typed access to one llama.cpp model and its context through llama-cpp-python's low-level API.

``Context.cached`` is the single source of truth for what the KV cache holds: every decode appends to it and every
rollback removes from it, only after llama.cpp confirmed the change.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as lc
import numpy as np

from ..errors import EngineError, ModelError

GGUF_MAGIC = b"GGUF"
_SEQ = 0


@lc.llama_log_callback
def _keep_errors(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # llama.cpp logs loudly to stderr; keep only recent errors so failures can be explained in one line.
    if level == 3:
        _recent_errors.append(text.decode("utf-8", "replace").strip())
        del _recent_errors[:-5]


_recent_errors: list[str] = []
lc.llama_log_set(_keep_errors, ctypes.c_void_p(0))
lc.llama_backend_init()


def last_llama_error() -> str:
    return _recent_errors[-1] if _recent_errors else ""


def check_gguf_file(path: Path, role: str) -> None:
    """Fail with a clear line when ``path`` is not a readable GGUF file."""
    if not path.exists():
        raise ModelError(f"{role} model not found: {path} — check the path in the profile")
    if not path.is_file():
        raise ModelError(f"{role} model path is not a file: {path} — point the profile at a .gguf file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read {role} model {path}: {exc.strerror} — check its permissions") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{role} model {path} is not a GGUF file (bad header) — re-download it or pick another file")


class Model:
    """A loaded GGUF model: weights, vocabulary and metadata."""

    def __init__(self, path: Path, *, role: str = "target", n_gpu_layers: int = 0) -> None:
        check_gguf_file(path, role)
        params = lc.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        _recent_errors.clear()
        ptr = lc.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            detail = last_llama_error() or "llama.cpp refused it"
            raise ModelError(
                f"cannot load {role} model {path}: {detail} — the file is truncated or corrupt; re-download it"
            )
        self.path = path
        self.role = role
        self.ptr = ptr
        self.vocab = lc.llama_model_get_vocab(ptr)
        self.n_vocab: int = lc.llama_vocab_n_tokens(self.vocab)
        self.vocab_type: int = lc.llama_vocab_type(self.vocab)
        self.bos: int = lc.llama_vocab_bos(self.vocab)
        self.eos: int = lc.llama_vocab_eos(self.vocab)
        self.add_bos: bool = lc.llama_vocab_get_add_bos(self.vocab)
        self.add_eos: bool = lc.llama_vocab_get_add_eos(self.vocab)
        self.n_ctx_train: int = lc.llama_model_n_ctx_train(ptr)
        self.size_bytes: int = lc.llama_model_size(ptr)
        self.n_params: int = lc.llama_model_n_params(ptr)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._pieces: dict[int, bytes] = {}  # the decode loop asks for the same few thousand tokens again and again
        self._eog: dict[int, bool] = {}

    def close(self) -> None:
        if self.ptr:
            lc.llama_model_free(self.ptr)
            self.ptr = None

    @property
    def name(self) -> str:
        return self.meta("general.name") or self.path.stem

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = lc.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def chat_template(self) -> str | None:
        raw = lc.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8") if raw else None

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, True)
        if n < 0:
            capacity = -n
            buf = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, True)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The text bytes of a token as it appears in output (control tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self.raw_piece(token, special=False)
        return cached

    def raw_piece(self, token: int, *, special: bool) -> bytes:
        n = lc.llama_token_to_piece(self.vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.vocab, token, big, len(big), 0, special)
            return big.raw[:n]
        return self._piece_buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def token_text(self, token: int) -> bytes:
        return lc.llama_vocab_get_text(self.vocab, token) or b""

    def is_eog(self, token: int) -> bool:
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = bool(lc.llama_vocab_is_eog(self.vocab, token))
        return known


class Context:
    """A KV cache for one sequence of one model, and the batch used to extend it."""

    def __init__(self, model: Model, *, n_ctx: int, threads: int, n_batch: int = 512) -> None:
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        ctx = lc.llama_init_from_model(model.ptr, params)
        if not ctx:
            raise EngineError(
                f"cannot create a {n_ctx}-token context for {model.path.name}: {last_llama_error() or 'out of memory'}"
                " — lower n_ctx in the profile"
            )
        self.model = model
        self.ptr = ctx
        self.n_ctx: int = lc.llama_n_ctx(ctx)
        self.n_batch = n_batch
        self.mem = lc.llama_get_memory(ctx)
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        self.cached: list[int] = []
        self._n_outputs = 0
        self._logits_view: tuple[int, int, np.ndarray] | None = None

    def close(self) -> None:
        if self.ptr:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self.ptr)
            self.ptr = None

    def set_threads(self, threads: int) -> None:
        lc.llama_set_n_threads(self.ptr, threads, threads)

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> None:
        """Append ``tokens`` to the cache; logits are kept for every token or only the last one."""
        if all_logits and len(tokens) > self.n_batch:
            raise EngineError(f"cannot verify {len(tokens)} tokens in one batch of {self.n_batch}")
        if len(self.cached) + len(tokens) > self.n_ctx:
            raise EngineError(f"the context of {self.n_ctx} tokens is full")
        batch = self._batch
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= len(tokens)
            pos0 = len(self.cached)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = pos0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = _SEQ
                batch.logits[i] = all_logits or (last_chunk and i == len(chunk) - 1)
            batch.n_tokens = len(chunk)
            rc = lc.llama_decode(self.ptr, batch)
            if rc != 0:
                # A failed decode leaves nothing of this chunk in the cache; drop any partial ubatch to be sure.
                lc.llama_memory_seq_rm(self.mem, _SEQ, pos0, -1)
                raise EngineError(f"llama_decode failed with code {rc}: {last_llama_error() or 'no KV slot'}")
            self.cached.extend(chunk)
        self._n_outputs = len(tokens) if all_logits else 1

    def logits(self) -> np.ndarray:
        """Logits of the last decode, one row per output token (a view valid until the next decode)."""
        ptr = lc.llama_get_logits(self.ptr)
        address = ctypes.addressof(ptr.contents)
        view = self._logits_view
        if view is None or view[0] != address or view[1] != self._n_outputs:
            array = np.ctypeslib.as_array(ptr, shape=(self._n_outputs, self.model.n_vocab))
            view = self._logits_view = (address, self._n_outputs, array)
        return view[2]

    def truncate(self, n_keep: int) -> None:
        """Forget every cached token from position ``n_keep`` on."""
        if n_keep >= len(self.cached):
            return
        if not lc.llama_memory_seq_rm(self.mem, _SEQ, n_keep, -1):
            raise EngineError(
                f"{self.model.path.name}: llama.cpp cannot remove part of this model's memory (recurrent or hybrid"
                " architecture) — use it without speculation"
            )
        del self.cached[n_keep:]

    def sync(self, tokens: Sequence[int]) -> int:
        """Make the cache hold exactly ``tokens`` with logits for the last one; returns how many were decoded."""
        keep = common_prefix(self.cached, tokens)
        # The last token must be decoded now to produce its logits.
        keep = min(keep, len(tokens) - 1)
        self.truncate(keep)
        self.decode(tokens[keep:])
        return len(tokens) - keep


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the shared prefix; compares slices at C speed since caches diverge, if at all, near their end."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i, step = 0, 256
    while step:
        while i + step <= n and a[i : i + step] == b[i : i + step]:
            i += step
        step //= 4
    return i
