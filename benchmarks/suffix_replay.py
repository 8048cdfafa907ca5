"""The suffix drafter's own replay (#35 item 2): "auto" as the engine runs it, against the oracle of the same drafter,
with earlier chats in its index and no timing noise.

For each family of ``repeated_work.toml`` its ``earlier`` prompts are answered plainly and indexed as stored chats are
(a document each: the question's last ``history.PROMPT_TAIL`` tokens as the template renders them, then the reply);
then every ``now`` prompt's greedy reply is recorded and replayed step by step, as ``ngram_replay.py`` replays n-gram
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

    python benchmarks/suffix_replay.py [--repeat 3] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ngram_replay import ORACLE, Fixed, Reply, draft_limit, record, replay, swept
from repeated_work import families

from specchat.bench.tasks import Task
from specchat.engine.core import Engine
from specchat.engine.draft_length.adaptive import AUTO_K_MAX, Adaptive
from specchat.engine.draft_length.auto import VerifyCost
from specchat.engine.draft_length.learned_costs import LearnedVerifyCost
from specchat.engine.draft_length.memory import AutoMemory
from specchat.engine.drafters import METHODS, NO_DRAFT
from specchat.engine.drafters.history import History, HistoryIndex, StoredReply, documents_of
from specchat.engine.drafters.history_cache import TokenCache
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.drafters.suffix import SuffixDrafter
from specchat.engine.loop import Rules, StepOutcome
from specchat.profiles import load_profile, run_config

END = -1  # the target's token after a reply's last one: its end token, which the recorded reply does not hold


def accepted(tokens: list[int], seq: list[int], pos: int) -> int:
    """How many of ``tokens`` the recorded conversation ``seq`` has from ``pos`` on."""
    right = 0
    while right < len(tokens) and pos + right < len(seq) and tokens[right] == seq[pos + right]:
        right += 1
    return right


class ColdSuffix(SuffixDrafter):
    def forget(self) -> None:
        """Before each replayed reply (``ngram_replay.replay``): no reply of this process to copy, as `specchat bench`
        times by default; the stored chats stay."""
        self.ngram.forget()


def replay_auto(reply: Reply, auto: Adaptive, verify: VerifyCost, rules: Rules, drafter: ColdSuffix) -> float:
    """Plain decoding's cost over ``auto``'s on this reply, each step planned, chosen and learned from as the engine's
    step loop (``Engine._decode``, ``loop.speculate``) does."""
    seq = reply.prompt + reply.tokens
    drafter.forget()
    auto.begin_reply()
    pos, seconds = len(reply.prompt) + 1, 0.0
    while pos < len(seq):
        k, choose = auto.plan(draft_limit(reply, verify, pos))
        proposal = drafter.propose(seq[:pos], k, rules) if k > 0 else NO_DRAFT
        kept = choose(proposal) if choose is not None and proposal.tokens else min(k, len(proposal.tokens))
        tokens = proposal.tokens[:kept]
        right = accepted(tokens, seq, pos)
        outcome = StepOutcome(
            drafted=len(tokens), n_accepted=right, accepted=tokens[:right], rejected=tokens[right:],
            token=seq[pos + right] if pos + right < len(seq) else END, match=proposal.match,
            next_proposed=proposal.tokens[kept] if len(proposal.tokens) > kept else None,
            t_batch=verify(len(tokens) + 1), draft=replace(proposal, tokens=tokens) if tokens else NO_DRAFT)
        auto.observe(outcome, pos)
        seconds += verify(len(tokens) + 1)
        pos += right + 1
    return (len(reply.tokens) - 1) * verify(1) / seconds


def indexed(engine: Engine, earlier: list[Reply], folder: Path) -> History:
    """The earlier replies as the engine indexes stored chats (``history.documents_of``: the question rendered alone,
    the reply's own tokens)."""
    target = engine.target
    stored = [StoredReply((i, 0), reply.task.prompt, target.detokenize(reply.tokens), tuple(reply.tokens),
                          target.identity) for i, reply in enumerate(earlier)]
    documents = documents_of(stored, target.identity, engine.template,
                             lambda text: target.tokenize(text, add_special=False), lambda: None,
                             TokenCache(folder / "tokens.npz"))
    return History(index=HistoryIndex(documents))


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
    k_max = {kind: min(longest, verify.exact - 1) for kind, longest in AUTO_K_MAX.items()}
    spec, rules = config.spec, engine.speculation.rules
    ngram = NgramDrafter(spec.ngram_min, spec.ngram_max)
    with tempfile.TemporaryDirectory() as folder:
        suffix = ColdSuffix(NgramDrafter(spec.ngram_min, spec.ngram_max), indexed(engine, earlier, Path(folder)))
        print(f"{len(earlier)} earlier replies indexed ({suffix.history.index.tokens} tokens), {len(now)} replayed")
        auto = Adaptive.open(LearnedVerifyCost(verify), True, k_max, None, AutoMemory(Path(folder) / "memory.json"),
                             "auto|replay", "costs|replay", 0, recalls=METHODS["suffix"].reads_history)
        policies: dict[str, Callable[[Reply], float]] = {
            "auto": lambda reply: replay_auto(reply, auto, verify, rules, suffix),
            **{f"n_max {n}": (lambda reply, n=n: replay(reply, Fixed(n), verify, rules, suffix)) for n in (4, 16)},
            "oracle": lambda reply: replay(reply, ORACLE, verify, rules, suffix),
            "ngram oracle": lambda reply: replay(reply, ORACLE, verify, rules, ngram),
        }
        speeds: dict[tuple[str, str], list[float]] = defaultdict(list)
        for rep in range(args.repeat + 1):  # the first round warms "auto" up, as a bench's excluded warm-up run
            for name, run in policies.items():
                for reply in now:
                    speed = run(reply)
                    if rep:
                        speeds[name, reply.task.name].append(speed)
    names = list(policies)
    print("\nspeed-up over plain decoding in the replay (median of the repetitions, mean over a family's prompts)\n")
    print(f"{'family':16}" + "".join(f"{name:>14}" for name in names) + f"{'auto / oracle':>15}")
    for family in [f["name"] for f in found] + ["all"]:
        tasks = [r.task.name for r in now if family == "all" or r.task.name.startswith(f"{family}-")]
        means = {n: statistics.fmean(statistics.median(speeds[n, t]) for t in tasks) for n in names}
        share = means["auto"] / means["oracle"]
        print(f"{family:16}" + "".join(f"{means[n]:>13.2f}×" for n in names) + f"{share:>15.2f}")
    engine.close()


if __name__ == "__main__":
    main()
