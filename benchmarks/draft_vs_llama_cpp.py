"""specchat's ``draft`` method against llama.cpp's own ``llama-speculative-simple`` on the same pair and settings.

Both run greedy, with the same n_max, p_min, threads and prompt (the target's chat template applied by specchat and
passed verbatim to llama.cpp), alternating, N times. Reported: decode tokens/s after the prompt, acceptance, and the
median of the paired ratios. Build llama.cpp's tools as the README explains, then:

    python benchmarks/draft_vs_llama_cpp.py --binary PATH/llama-speculative-simple [--repeat 5] [--n-max 4]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess

from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
from specchat.engine.core import Engine
from specchat.engine.events import ReplyFinished
from specchat.profiles import embedded

PROMPT = "Write a Python function that checks whether a number is prime."
SYSTEM = "You are a helpful assistant."


def run_specchat(config: EngineConfig, n: int) -> tuple[float, float, int]:
    engine = Engine(config)
    try:
        for event in engine.reply(PROMPT, max_tokens=n):
            if isinstance(event, ReplyFinished):
                s = event.stats
                return s.decode_tps or 0.0, s.acceptance_rate or 0.0, s.generated
    finally:
        engine.close()
    raise RuntimeError("no reply")


def run_llama_cpp(binary: str, target: str, draft: str, prompt: str, args: argparse.Namespace, n: int) -> tuple[float, float]:
    out = subprocess.run(
        [binary, "-m", target, "-md", draft, "--spec-type", "draft-simple", "-t", str(args.threads),
         "-td", str(args.threads), "--spec-draft-n-max", str(args.n_max), "--spec-draft-p-min", str(args.p_min),
         "--temp", "0", "-n", str(n), "-c", "2048", "-p", prompt],
        capture_output=True, text=True, check=True,
    ).stderr
    speed = float(re.search(r"decoded\s+\d+ tokens in .*speed:\s+([\d.]+) t/s", out).group(1))
    accept = float(re.search(r"accept\s+=\s+([\d.]+)%", out).group(1)) / 100
    return speed, accept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True, help="llama.cpp's llama-speculative-simple")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--n-max", type=int, default=4)
    parser.add_argument("--p-min", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    target, draft = embedded.target_path(), embedded.draft_path()
    config = EngineConfig(
        target=ModelSettings(target, threads=args.threads), draft=ModelSettings(draft, threads=args.threads),
        spec=SpecConfig("draft", n_max=args.n_max, p_min=args.p_min), n_ctx=2048, system_prompt=SYSTEM,
    )
    probe = Engine(config)
    prompt = probe.template.render([{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
                                   add_generation_prompt=True)
    probe.close()
    _, _, n = run_specchat(config, args.tokens)  # warm-up; also fixes the reply length for llama.cpp
    ours, theirs, ratios = [], [], []
    for _ in range(args.repeat):
        tps, acc, _ = run_specchat(config, args.tokens)
        ref, ref_acc = run_llama_cpp(args.binary, str(target), str(draft), prompt, args, n)
        ours.append((tps, acc))
        theirs.append((ref, ref_acc))
        ratios.append(tps / ref)
    med = statistics.median
    print(f"reply length          : {n} tokens, n_max {args.n_max}, p_min {args.p_min}, {args.threads} threads")
    print(f"specchat draft        : {med(t for t, _ in ours):6.1f} tok/s  acceptance {ours[0][1]:.1%}")
    print(f"llama-speculative-simple: {med(t for t, _ in theirs):6.1f} tok/s  acceptance {theirs[0][1]:.1%}")
    print(f"specchat / llama.cpp  : {med(ratios):.3f}  (median of paired ratios; min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
