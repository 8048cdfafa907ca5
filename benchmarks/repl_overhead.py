"""Decode speed in `specchat repl` versus `specchat ask`, on the same prompt and profile, both in a real terminal.

Alternates, N times and each in a fresh process in a tmux pane of the same size, `specchat ask` and `specchat repl`
answering the same prompt, and reports the engine's own decode tokens/s from each one's summary line and the median of
the paired ratios with its quartiles. The REPL streams into the scrollback and redraws its status line while the
engine decodes; the goal is a ratio of at least 0.97.

    python benchmarks/repl_overhead.py [--profile tiny] [--repeat 16] [--tokens 300]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tempfile

from tui_overhead import PROMPT, Pane, alternate, ask_in_terminal, in_tmux, report

SUMMARY = re.compile(r"(\d+\.\d) tok/s · TTFT")


def repl_in_terminal(profile: str, tokens: int, data: str) -> float:
    # Its own data folder: the chats and prompt history of this benchmark stay out of the user's.
    command = "env XDG_DATA_HOME=%s %s" % (shlex.quote(data), shlex.join(
        [sys.executable, "-m", "specchat", "repl", "--profile", profile, "--max-tokens", str(tokens)]))
    sent = False

    def summary(pane: Pane) -> float | None:
        nonlocal sent
        screen = pane.screen()
        if not sent:
            if "/help for commands" in screen:  # loaded, at the prompt
                pane.type(PROMPT)
                sent = True
            return None
        found = SUMMARY.search(screen)
        return float(found.group(1)) if found else None

    return in_tmux(command, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--repeat", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=300)
    args = parser.parse_args()
    names = ("specchat ask (tmux)", "specchat repl (tmux)")
    with tempfile.TemporaryDirectory() as data:
        ask_in_terminal(args.profile, 16)  # warm-up: file caches, the embedded draft
        pairs = alternate(lambda: ask_in_terminal(args.profile, args.tokens),
                          lambda: repl_in_terminal(args.profile, args.tokens, os.path.join(data, "repl")),
                          args.repeat, names)
    print(report(pairs, args.profile, args.tokens, names))


if __name__ == "__main__":
    main()
