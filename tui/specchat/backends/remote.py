"""A server already running — a llama-server, or any OpenAI-compatible one such as vLLM — reached at
``[backend] url``. It holds its own models (the target's GGUF here, when there is one, only tokenizes) and drafts as it
was started: the same backend class as a managed llama-server, which is never started or stopped here."""

from __future__ import annotations

from .run_config import BackendKind
from .llama_server import LlamaServerBackend

KIND = BackendKind("remote", "remote", LlamaServerBackend, own_models=True, needs_url=True, server_keys=True)
