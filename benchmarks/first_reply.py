"""Speculation that pays from the first reply: a fresh process against the tenth reply of an old one.

"auto" learns as it drafts (n-gram hazards per match length, the verify costs of this machine) and keeps what it
learned in the user cache (engine/draft_length/learned_store.py). Here, with one isolated user cache:

- an *old* process answers the same prompt ten times, each as a first answer (KV cache and remembered replies
  cleared: only what "auto" learned carries over), each spec reply alternated with a plain one;
- a *fresh* process then answers it once, starting from what the old one kept;
- a *cold* process answers it once with the memory removed, starting from the priors (what every process did before).

Each reply's speed-up is plain decode time over speculative decode time of the same prompt in the same process (decode
only: the prefill is the same for both). Rounds alternate; medians are reported, and the goal's ratio: fresh / tenth.

    python benchmarks/first_reply.py [--rounds 3] [--profile ngram] [--task copy-notice] [--tasks FILE]
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


def worker(profile: str, tasks_file: Path, task_name: str, replies: int) -> None:
    """In this process: ``replies`` spec replies to the task, each after a plain one; prints their speed-ups."""
    from specchat.bench.runners import conversation_before
    from specchat.bench.tasks import load_tasks
    from specchat.engine import ReplyFinished
    from specchat.engine.core import Engine
    from specchat.profiles import load_profile, run_config

    task = next(t for t in load_tasks(tasks_file)[0] if t.name == task_name)
    config = dataclasses.replace(run_config(load_profile(profile)), adapt_threads=False)
    spec = Engine(config)
    plain = Engine(dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none")))

    def decode_seconds(engine: Engine) -> tuple[float, list[int], dict]:
        engine.clear_cache(replies=True)
        engine.restore(conversation_before(engine.config, task))
        finished = [e for e in engine.reply(task.prompt, max_tokens=task.max_tokens) if isinstance(e, ReplyFinished)]
        stats = finished[0].stats
        return stats.t_total - stats.t_prefill, list(engine.tokens), {"drafted": stats.drafted,
                                                                      "accepted": stats.accepted}

    speedups = []
    for _ in range(replies):
        t_plain, reference, _ = decode_seconds(plain)
        t_spec, tokens, counts = decode_seconds(spec)
        if tokens != reference:
            raise SystemExit("speculation changed the output: the comparison is void")
        speedups.append({"speedup": t_plain / t_spec, **counts})
    print(json.dumps(speedups))


def run_worker(home: Path, args: argparse.Namespace, replies: int) -> list[dict]:
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    out = subprocess.run([sys.executable, __file__, "--worker", str(replies), "--profile", args.profile, "--task",
                          args.task, "--tasks", str(args.tasks)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", default="ngram")
    parser.add_argument("--task", default="copy-notice")
    parser.add_argument("--tasks", type=Path, default=HERE / "held_out_tasks.toml")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.profile, args.tasks, args.task, args.worker)
        return
    from specchat import paths

    tenth, fresh, cold = [], [], []
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            cache = home / ".cache" / "specchat"
            cache.mkdir(parents=True)
            for name in ("verify-costs.json", "cpu-probe.json"):  # measured sweeps: not what is compared here
                if (paths.cache_dir() / name).is_file():
                    shutil.copy(paths.cache_dir() / name, cache / name)
            for draft in paths.cache_dir().glob("*.gguf*"):  # the embedded draft, derived once
                shutil.copy(draft, cache / draft.name)
            old = run_worker(home, args, 10)
            fresh_run = run_worker(home, args, 1)
            (cache / "auto-memory.json").unlink()
            cold_run = run_worker(home, args, 1)
        tenth.append(old[-1]["speedup"])
        fresh.append(fresh_run[0]["speedup"])
        cold.append(cold_run[0]["speedup"])
        old_speedups = " ".join(f"{r['speedup']:.2f}" for r in old)
        print(f"round {round_ + 1}: old process {old_speedups} | fresh"
              f" {fresh[-1]:.2f} ({fresh_run[0]['accepted']}/{fresh_run[0]['drafted']} accepted) | cold {cold[-1]:.2f}"
              f" ({cold_run[0]['accepted']}/{cold_run[0]['drafted']})", flush=True)
    t, f, c = (statistics.median(x) for x in (tenth, fresh, cold))
    print(f"median speed-up: tenth reply of one process {t:.2f}×, first reply of a fresh process {f:.2f}× ({f / t:.2f}"
          f" of the tenth), of a process without memory {c:.2f}× ({c / t:.2f})")


if __name__ == "__main__":
    main()
