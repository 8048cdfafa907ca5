"""Cancel-and-switch storms: 200 rounds through Pilot on the real model, invariants checked after every round.

Each round sends a prompt, presses Esc at a random moment, then switches profile with F2 — a parameter-only switch and
a full reload (another target file) in turn — and checks that the target's KV cache is the tokenised history (against
llama.cpp's own count of cached positions), and that the reply record, its view and the store agree. RSS is sampled
after every round; the report gives its growth from round 20 (after the caches have filled) to the end.

With ``--new-chat-every N`` a new chat starts after every N rounds, which tells memory the chat on screen holds from
memory anything else keeps.

The storm and its checks are the test suite's (``tests/chats/test_reliability.py``, 8 rounds there): this runs that
test, in a process of its own, with as many rounds as asked, and prints what it prints.

    python benchmarks/stress/storms.py [--rounds 200] [--seed 1] [--new-chat-every N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/chats/test_reliability.py::test_a_cancel_and_switch_storm_keeps_cache_record_view_and_store_in_step"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--new-chat-every", type=int, default=0)
    args = parser.parse_args()
    env = {**os.environ, "SPECCHAT_STORM_ROUNDS": str(args.rounds), "SPECCHAT_STORM_SEED": str(args.seed),
           "SPECCHAT_STORM_NEW_CHAT_EVERY": str(args.new_chat_every)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", TEST], cwd=ROOT, env=env)
    sys.exit(run.returncode)


if __name__ == "__main__":
    main()
