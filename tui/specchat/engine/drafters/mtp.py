"""Multi-token prediction: heads of the target itself draft (Qwen3.5/3.6's, in the model file), or an assistant GGUF
made for the target (Gemma 4's, passed as the draft model). llama.cpp's server runs them; specchat's own loop does
not (profiles/assistant.py finds the assistant)."""

from .base import Method

METHOD = Method("mtp", "the target's own multi-token prediction heads draft (a llama.cpp server runs them)",
                "draft-mtp", server_only="multi-token prediction heads run there, not in specchat's own loop",
                assistant=True)
