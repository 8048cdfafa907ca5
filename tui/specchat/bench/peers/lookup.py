"""Peer "lookup": llama-cpp-python with its prompt-lookup drafter (``LlamaPromptLookupDecoding``), at its own default
length."""

from __future__ import annotations

from . import Peer
from .llama_cpp_python import opened

LOOKUP_TOKENS = 10  # LlamaPromptLookupDecoding's own default

PEER = Peer("lookup", "lookup (llama-cpp-python prompt lookup)",
            lambda context, _value: opened(context, lookup_tokens=LOOKUP_TOKENS), order=20)
