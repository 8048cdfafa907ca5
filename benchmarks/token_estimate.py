"""How far off is "≈"? tiktoken's cl100k count of a reply streamed as text (an OpenAI-compatible server sends no ids)
against the server's own count of the same reply.

A llama-server on loopback (the embedded pair, draft-simple) is asked through its `/v1/chat/completions` — the route a
vLLM box takes — in the languages and kinds of text a chat sees. For each prompt: the live estimate specchat shows
(counted chunk by chunk, as the stream arrives), tiktoken's count of the whole reply, and the server's `usage`.

    python benchmarks/token_estimate.py [--max-tokens 120] [--server PATH]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import tiktoken
from specchat.backends import open_backend
from specchat.backends.run_config import BackendSettings, RunConfig
from specchat.backends.openai_chat import ENCODING
from specchat.backends.server_build import find_server
from specchat.engine import ModelSettings, SpecConfig
from specchat.engine.events import ReplyFinished
from specchat.profiles import embedded

PROMPTS = {
    "English prose": "Explain in a paragraph why the sky is blue.",
    "code": "Write a Python function that checks whether a string is a palindrome, with a docstring.",
    "Spanish": "Explica en un párrafo cómo funciona la decodificación especulativa.",
    "list": "List twenty fruits, one per line.",
    "Chinese": "Translate to Chinese: I love drinking green tea in the morning with my friends.",
    "emoji": "Reply with a row of ten different emoji and say what each means.",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--server", type=Path, default=None, help="llama-server (default: the one specchat runs)")
    args = parser.parse_args()
    binary = args.server or find_server()
    config = RunConfig(ModelSettings(embedded.target_path(), threads=2),
                       ModelSettings(embedded.draft_path(), threads=2),
                          SpecConfig("draft", n_max=4), n_ctx=2048, system_prompt="You are a helpful assistant.",
                          backend=BackendSettings(kind="llama-server", binary=str(binary)))
    managed = open_backend(config)
    encoding = tiktoken.get_encoding(ENCODING)
    try:
        remote = open_backend(RunConfig(ModelSettings(Path("remote")), None, SpecConfig("none"), n_ctx=2048,
                                        system_prompt=config.system_prompt,
                                        backend=BackendSettings(kind="remote", url=managed.url, api="openai")))
        ratios = []
        print(f"{'text':<14} {'live ≈':>7} {'whole':>6} {'server':>7} {'live/server':>12}")
        for label, prompt in PROMPTS.items():
            finished = list(remote.answer([], prompt, max_tokens=args.max_tokens))[-1]
            assert isinstance(finished, ReplyFinished)
            live, server = finished.stats.generated, finished.stats.server_tokens
            whole = len(encoding.encode(finished.text))
            ratio = live / server if server else float("nan")
            ratios.append(ratio)
            print(f"{label:<14} {live:>7} {whole:>6} {server:>7} {ratio:>11.2f}×")
        print(f"median live/server {statistics.median(ratios):.2f}× (range {min(ratios):.2f}–{max(ratios):.2f}×)")
        remote.close()
    finally:
        managed.close()


if __name__ == "__main__":
    main()
