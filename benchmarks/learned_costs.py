"""A verify sweep taken under load, corrected by the steps timed after it (engine/draft_length/learned_costs.py).

The sweep is measured once and trusted for a week; one taken during a busy minute used to steer "auto" wrongly for
that week. Here, in isolated user caches: one sweep taken with ``--loops`` busy loops running beside it, one taken
idle. Then, on the idle machine, fresh processes take turns (each without any kept memory): with the idle sweep, with
the busy one, and with the busy one and learning switched off (the costs frozen at the seed — the sweep capped per
row — the plain and longer steps still taken). Each answers the task until ``--warmup-steps`` steps have passed, then
``--replies`` measured replies, each beside a plain one of the same prompt in the same process. Reports the median speed-ups and the goal's ratio, busy-then-learned / idle.

    python benchmarks/learned_costs.py [--rounds 3] [--loops 2] [--profile ngram] [--task copy-notice]
                                       [--busy-sweep verify-costs.json]

``--busy-sweep`` takes the busy sweep from a verify-costs file kept from a busy minute (one measured while llama.cpp
compiled, say) instead of measuring one beside the busy loops; it must come from this machine's user cache (the same
model, threads and llama.cpp), or the run measures a sweep of its own and says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
BUSY = "while True: pass"


def worker(args: argparse.Namespace) -> None:
    from specchat.bench.runners import conversation_before
    from specchat.bench.tasks import load_tasks
    from specchat.engine import ReplyFinished
    from specchat.engine.core import Engine
    from specchat.engine.draft_length.learned_costs import LearnedVerifyCost
    from specchat.profiles import load_profile, run_config

    if args.frozen:  # the costs stay the sweep's, as before learning (a benchmark's switch, not a product one)
        LearnedVerifyCost.observe = lambda self, rows, depth, seconds: None  # type: ignore[method-assign]
    task = next(t for t in load_tasks(args.tasks)[0] if t.name == args.task)
    config = dataclasses.replace(run_config(load_profile(args.profile)), adapt_threads=False)
    spec = Engine(config)  # a sweep missing from the cache is measured here (the --sweep run)
    if args.sweep:
        return
    plain = Engine(dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none")))

    def answer(engine: Engine) -> tuple[float, list[int], int]:
        engine.clear_cache(replies=True)
        engine.restore(conversation_before(engine.config, task))
        done = [e for e in engine.reply(task.prompt, max_tokens=task.max_tokens) if isinstance(e, ReplyFinished)][0]
        return done.stats.t_total - done.stats.t_prefill, list(engine.tokens), done.stats.steps

    steps = 0
    while steps < args.warmup_steps:
        steps += answer(spec)[2]
    speedups = []
    for _ in range(args.replies):
        t_plain, reference, _ = answer(plain)
        t_spec, tokens, _ = answer(spec)
        if tokens != reference:
            raise SystemExit("speculation changed the output: the comparison is void")
        speedups.append(t_plain / t_spec)
    print(json.dumps({"speedup": statistics.median(speedups), "warmup_steps": steps}))


def run(home: Path, args: argparse.Namespace, *extra: str) -> dict | None:
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    (home / ".cache" / "specchat" / "auto-memory.json").unlink(missing_ok=True)  # nothing learned carries over
    out = subprocess.run([sys.executable, __file__, "--worker", "--profile", args.profile, "--task", args.task,
                          "--tasks", str(args.tasks), "--replies", str(args.replies), "--warmup-steps",
                          str(args.warmup_steps), *extra], capture_output=True, text=True, env=env, check=True)
    lines = out.stdout.splitlines()
    return json.loads(lines[-1]) if lines else None


def cache_home(root: Path, name: str) -> Path:
    from specchat import paths

    home = root / name
    cache = home / ".cache" / "specchat"
    cache.mkdir(parents=True)
    for draft in paths.cache_dir().glob("*.gguf*"):  # the embedded draft, derived once
        shutil.copy(draft, cache / draft.name)
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", type=int, default=2)
    parser.add_argument("--profile", default="ngram")
    parser.add_argument("--task", default="copy-notice")
    parser.add_argument("--tasks", type=Path, default=HERE / "held_out_tasks.toml")
    parser.add_argument("--replies", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--busy-sweep", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sweep", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--frozen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        idle, busy = cache_home(Path(tmp), "idle"), cache_home(Path(tmp), "busy")
        run(idle, args, "--sweep")
        if args.busy_sweep:
            shutil.copy(args.busy_sweep, busy / ".cache/specchat/verify-costs.json")
            kept = (busy / ".cache/specchat/verify-costs.json").read_text()
            run(busy, args, "--sweep")
            if (busy / ".cache/specchat/verify-costs.json").read_text() != kept:
                print("the kept sweep is not this machine's (another model, threads or llama.cpp): measured one instead")
        else:
            loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.loops)]
            try:
                run(busy, args, "--sweep")
            finally:
                for loop in loops:
                    loop.kill()
        for home in (idle, busy):
            entries = json.loads((home / ".cache/specchat/verify-costs.json").read_text()).values()
            sweep = max((e for e in entries if "sizes" in e), key=lambda e: len(e["sizes"]))
            plain = sweep["seconds"][0]
            print(f"{home.name} sweep: " + ", ".join(f"{b}: {s / plain:.2f}" for b, s in
                                                      zip(sweep["sizes"], sweep["seconds"]) if b in (2, 4, 8, 16, 32, 64))
                  + f" plain steps (plain step {plain * 1000:.1f} ms)")
        results: dict[str, list[float]] = {"idle sweep": [], "busy sweep, learned": [], "busy sweep, frozen": []}
        for round_ in range(args.rounds):
            for name, home, extra in (("idle sweep", idle, ()), ("busy sweep, learned", busy, ()),
                                      ("busy sweep, frozen", busy, ("--frozen",))):
                results[name].append(run(home, args, *extra)["speedup"])
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.2f}×" for n, v in results.items()), flush=True)
    medians = {name: statistics.median(v) for name, v in results.items()}
    idle_speedup = medians["idle sweep"]
    print("median speed-up after the warm-up: " + ", ".join(f"{n} {m:.2f}× ({m / idle_speedup:.2f} of idle)"
                                                            for n, m in medians.items()))


if __name__ == "__main__":
    main()
