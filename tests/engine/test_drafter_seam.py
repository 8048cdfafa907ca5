"""A new drafter is one module (docs/extending.md: "Adding a drafter"): a module dropped into ``engine/drafters/``
that defines ``METHOD`` is a method profiles name, ``specchat ask --method`` offers and the engine runs, with greedy
output equal to plain decoding and counters that add up — nothing else edited. The module goes into a copy of the package, run in its
own process, so the source tree is not touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import specchat
from helpers import THREADS
from specchat.engine.drafters import METHODS

REPEAT = '''
"""Drafts the conversation's last token again, n_max times: a drafter whose guesses are mostly wrong."""

from specchat.engine.drafters.base import Draft, Drafter, Method


class Repeat(Drafter):
    def propose(self, seq, n_max, rules):
        return Draft([seq[-1]] * n_max)


METHOD = Method("repeat", "the last token again", "none", build=lambda parts: Repeat())
'''

PROMPT = "Repeat after me: la la la la la, ñandú ñandú, 猫猫猫 🙂🙂🙂"


def ask(copy: Path, profile: Path, *args: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(copy)}  # the copy, not the installed package
    result = subprocess.run([sys.executable, "-m", "specchat", "ask", "--profile", str(profile), "--json",
                             "--max-tokens", "48", *args, PROMPT], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_drafter_in_one_new_module_runs_from_a_profile_exactly(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(Path(specchat.__file__).parent, copy / "specchat", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "specchat" / "engine" / "drafters" / "repeat.py").write_text(REPEAT)
    profile = tmp_path / "repeat.toml"
    profile.write_text(f'[target]\nmodel = "embedded:target"\nthreads = {THREADS}\nadapt_threads = false\n'
                       '[draft]\nmethod = "repeat"\nn_max = 3\n')
    assert "repeat" not in METHODS  # only the copy has it

    speculative = ask(copy, profile)
    plain = ask(copy, profile, "--method", "none")

    def tokens(lines: list[dict]) -> list[int]:
        return [line["token"] for line in lines if line["type"] == "token"]

    summary = next(line for line in speculative if line["type"] == "summary")
    assert summary["method"] == "repeat" and summary["speculation_active"]
    assert summary["drafted"] > 0 and summary["accepted"] + summary["rejected"] == summary["drafted"]
    steps = [line for line in speculative if line["type"] == "step"]
    assert sum(step["drafted"] for step in steps) == summary["drafted"]
    assert tokens(speculative) == tokens(plain) and len(tokens(plain)) > 8

    # "auto" prices copies and model drafts; a method that is neither says so in one line, naming the key
    profile.write_text(profile.read_text().replace("n_max = 3", 'n_max = "auto"'))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    refused = subprocess.run([sys.executable, "-m", "specchat", "ask", "--profile", str(profile), "hi"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f'specchat: error: {profile}:7: [draft] n_max: method \'repeat\' has no "auto" draft length — set n_max to a'
        " number of tokens"]
