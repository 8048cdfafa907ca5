"""The suffix drafter simulated (#35 item 2; ``specchat.bench.simulation.suffix``): "auto" as the engine runs it, against the oracle of the same drafter,
with earlier chats in its index and no timing noise.

For each family of ``repeated_work.toml`` its ``earlier`` prompts are answered plainly and indexed as stored chats are
(a document each: the question's last ``history.PROMPT_TAIL`` tokens as the template renders them, then the reply);
then every ``now`` prompt's greedy reply is recorded and replayed step by step, as ``ngram_simulation.py`` replays n-gram
drafts: the real ``SuffixDrafter`` proposes from the conversation and the index, the policy picks how many tokens to
verify, the recorded reply says how many the target accepts, and a step costs the verify sweep's time for its batch.
A figure is plain decoding's cost over the policy's (decode steps only, as `specchat bench` reports). Policies:

- `auto`: the engine's own ``Adaptive`` for method "suffix" (hazards for copies of the conversation and, apart, for
  copies of stored chats; its plain and longer steps), fed each step as the engine feeds it, its learned costs taught
  the sweep's times; one carried over prompts and repetitions, as in one process;
- `n_max N`: up to N proposed tokens every step;
- `oracle`: knows how many proposed tokens the target accepts and verifies the best prefix of them: the ceiling of any
  draft-length policy for this drafter on these replies;
- `ngram oracle`: the same for the n-gram drafter alone (the open conversation, nothing stored): what the index adds.

    python benchmarks/suffix_simulation.py [--repeat 3] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import tomllib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from specchat.bench.simulation.ngram import ORACLE, Fixed, Reply, record, simulate, swept, sweep_line
from specchat.bench.simulation.suffix import ColdSuffix, indexed, simulate_auto
from specchat.bench.tasks import Task
from specchat.engine.core import Engine
from specchat.engine.draft_length.auto_length import AUTO_K_MAX, Adaptive
from specchat.engine.draft_length.learned_costs import LearnedVerifyCost
from specchat.engine.draft_length.learned_store import LearnedStore
from specchat.engine.drafters import METHODS
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.profiles import load_profile, run_config


def families() -> list[dict]:
    """``repeated_work.toml``'s families: each a name, its earlier prompts and the ones asked now."""
    return tomllib.loads(Path(__file__).with_name("repeated_work.toml").read_text())["family"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    config = run_config(load_profile("suffix"), **{"target.adapt_threads": False})
    engine = Engine(replace(config, spec=replace(config.spec, method="none")))
    found = families()
    earlier = record(engine, [Task(f"{f['name']}-earlier-{i}", p, max_tokens=args.max_tokens)
                              for f in found for i, p in enumerate(f["earlier"])])
    now = record(engine, [Task(f"{f['name']}-{i}", p, max_tokens=args.max_tokens)
                          for f in found for i, p in enumerate(f["now"])])
    verify = swept(engine, AUTO_K_MAX["ngram"] + 1)
    print(sweep_line(verify))
    k_max = {kind: min(longest, verify.exact - 1) for kind, longest in AUTO_K_MAX.items()}
    spec, rules = config.spec, engine.speculation.rules
    ngram = NgramDrafter(spec.ngram_min, spec.ngram_max)
    with tempfile.TemporaryDirectory() as folder:
        suffix = ColdSuffix(NgramDrafter(spec.ngram_min, spec.ngram_max), indexed(engine, earlier, Path(folder)))
        print(f"{len(earlier)} earlier replies indexed ({suffix.stored_chats.index.tokens} tokens), {len(now)} replayed")
        auto = Adaptive.open(LearnedVerifyCost(verify), True, k_max, None, LearnedStore(Path(folder) / "memory.json"),
                             "auto|replay", "costs|replay", 0, recalls=METHODS["suffix"].reads_stored_chats)
        policies: dict[str, Callable[[Reply], float]] = {
            "auto": lambda reply: simulate_auto(reply, auto, verify, rules, suffix),
            **{f"n_max {n}": (lambda reply, n=n: simulate(reply, Fixed(n), verify, rules, suffix)) for n in (4, 16)},
            "oracle": lambda reply: simulate(reply, ORACLE, verify, rules, suffix),
            "ngram oracle": lambda reply: simulate(reply, ORACLE, verify, rules, ngram),
        }
        speeds: dict[tuple[str, str], list[float]] = defaultdict(list)
        for rep in range(args.repeat + 1):  # the first round warms "auto" up, as a bench's excluded warm-up run
            for name, run in policies.items():
                for reply in now:
                    speed = run(reply)
                    if rep:
                        speeds[name, reply.task.name].append(speed)
    names = list(policies)
    print("\nspeed-up over plain decoding in the simulation (median of the repetitions, mean over a family's prompts)\n")
    print(f"{'family':16}" + "".join(f"{name:>14}" for name in names) + f"{'auto / oracle':>15}")
    for family in [f["name"] for f in found] + ["all"]:
        tasks = [r.task.name for r in now if family == "all" or r.task.name.startswith(f"{family}-")]
        means = {n: statistics.fmean(statistics.median(speeds[n, t]) for t in tasks) for n in names}
        share = means["auto"] / means["oracle"]
        print(f"{family:16}" + "".join(f"{means[n]:>13.2f}×" for n in names) + f"{share:>15.2f}")
    engine.close()


if __name__ == "__main__":
    main()
