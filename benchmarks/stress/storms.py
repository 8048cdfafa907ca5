"""Cancel-and-switch storms: 200 rounds through Pilot on the real model, invariants checked after every round.

Each round sends a prompt, presses Esc at a random moment, then switches profile with F2 — a parameter-only switch and
a full reload (another target file) in turn — and checks that the target's KV cache is the tokenised history (against
llama.cpp's own count of cached positions), and that the reply record, its view and the store agree. RSS is sampled
after every round; the report gives its growth from round 20 (after the caches have filled) to the end.

With ``--new-chat-every N`` a new chat starts after every N rounds, which tells memory the chat on screen holds from
memory anything else keeps.

    python benchmarks/stress/storms.py [--rounds 200] [--seed 1] [--new-chat-every N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from storms import StormLog, storm, storm_profiles  # noqa: E402
from helpers import wait_until  # noqa: E402

from specchat.app.chat_app import make_app  # noqa: E402
from specchat.app.settings import Settings  # noqa: E402
from specchat.profiles import embedded  # noqa: E402


async def main_async(rounds: int, seed: int, new_chat_every: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["XDG_CONFIG_HOME"] = str(folder / "config")  # the storm's profiles are user profiles here
        profiles = storm_profiles(folder / "config" / "specchat" / "profiles", embedded.target_path())
        db = folder / "chats.sqlite3"
        settings = Settings(db_path=db, keymap=folder / "keymap.toml", exports=folder / "exports", max_tokens=200,
                            resume=False, last_profile=None)
        log = StormLog()
        started = time.monotonic()
        async with make_app(settings).run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: pilot.app.backend is not None and pilot.app.busy is None)
            for block in range(0, rounds, 20):
                await storm(pilot, min(20, rounds - block), profiles, db, random.Random(seed + block), log,
                            new_chat_every)
                print(f"{log.rounds} rounds, {log.cancelled} cancelled mid-reply, switches {log.actions}, RSS"
                      f" {log.rss[-1] / 1e6:.0f} MB, {time.monotonic() - started:.0f} s", flush=True)
    base = log.rss[min(19, len(log.rss) - 1)]
    print(f"{log.rounds} rounds: invariants held after every round; {log.cancelled} replies cancelled by Esc;"
          f" switches {log.actions}; RSS {base / 1e6:.0f} MB after round 20, {log.rss[-1] / 1e6:.0f} MB at the end"
          f" ({(log.rss[-1] - base) / 1e6:+.0f} MB), peak {max(log.rss) / 1e6:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--new-chat-every", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main_async(args.rounds, args.seed, args.new_chat_every))


if __name__ == "__main__":
    main()
