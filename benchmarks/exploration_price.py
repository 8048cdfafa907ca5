"""What "off is never for good" costs (issue #47): the time the re-timing probes between replies take, against the
decoding time of the same replies, on Spec-Bench's free-text categories (writing, roleplay, reasoning, stem,
humanities, qa), the default profile, one process as a user's session.

Every probe is timed where it runs (``Speculation.retime``, wrapped here); the price is their sum over the replies'
decoding, beside the 2 % budget the probes are paid from. A run with probes forced (``--share 1``) shows what a probe
costs when one is due at every reply.

    python benchmarks/exploration_price.py [--per 3] [--max-tokens 256] [--share 0.02]
"""

from __future__ import annotations

import argparse
import time

from specchat.bench.spec_bench import Selection, read_questions, select, suite_path
from specchat.engine import ReplyFinished
from specchat.engine.core import Engine
from specchat.engine import speculation
from specchat.profiles import load_profile, run_config

FREE = ("writing", "roleplay", "reasoning", "stem", "humanities", "qa")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--share", type=float, default=speculation.RETIME_SHARE)
    parser.add_argument("--profile", default="suffix-draft")
    args = parser.parse_args()
    speculation.RETIME_SHARE = args.share
    probes: list[float] = []
    retime = speculation.Speculation.retime

    def timed(self, *a, **k):
        start = time.perf_counter()
        replaced = retime(self, *a, **k)
        spent = time.perf_counter() - start
        if spent > 1e-3:  # a probe ran (the check alone takes microseconds)
            probes.append(spent)
        return replaced

    speculation.Speculation.retime = timed
    tasks = select(read_questions(suite_path())[0], Selection(per=args.per, categories=FREE))
    engine = Engine(run_config(load_profile(args.profile)))
    decoding = 0.0
    off = 0
    for task in tasks:
        engine.new_chat()
        for text in (task.prompt, *task.follow_ups):
            stats = next(e for e in engine.reply(text, max_tokens=args.max_tokens) if isinstance(e, ReplyFinished)).stats
            decoding += stats.t_total - stats.t_prefill
            off += not engine.speculation_state().active
    replies = sum(1 + len(t.follow_ups) for t in tasks)
    print(f"{replies} replies, {decoding:.1f} s decoding; speculation off after {off} of them; {len(probes)} probes,"
          f" {sum(probes):.2f} s ({100 * sum(probes) / decoding:.2f} % of the decoding; budget {100 * args.share:.0f} %)"
          + (f", each {1000 * min(probes):.0f}–{1000 * max(probes):.0f} ms" if probes else ""))


if __name__ == "__main__":
    main()
