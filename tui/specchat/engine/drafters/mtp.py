"""Multi-token prediction: heads of the target itself draft (Gemma's, Qwen's MTP GGUFs). llama.cpp's server runs them;
specchat's own loop does not."""

from .base import Method

METHOD = Method("mtp", "the target's own multi-token prediction heads draft (a llama.cpp server runs them)",
                "draft-mtp", server_only="multi-token prediction heads run there, not in specchat's own loop")
