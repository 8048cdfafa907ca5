"""A new bench peer is one module (docs/extending.md: "Adding a bench peer"): a module dropped into ``bench/peers/``
that defines ``PEER`` is a name ``--peers`` takes (and ``all`` runs), its options are the CLI's, its rows are reported
beside specchat's, and a rival's rows are ranked per category. The module goes into a copy of the package, run in its
own process, so the source tree is not touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import specchat
from specchat.bench.peers import peers

ECHO = '''
"""A peer that answers every task with its prompt: what a peer module holds, and nothing else."""

import time

from specchat.bench.peers import Peer
from specchat.bench.runners import RunResult


class Echo:
    def __init__(self, times):
        self.times = times

    def name(self):
        return f"echo x{self.times}"

    def run(self, task, rep):
        start = time.perf_counter()
        text = " ".join([task.prompt] * self.times)
        return RunResult(self.name(), task.name, rep, 0.001, time.perf_counter() - start + 0.002, 3, 1500.0, text)

    def close(self):
        pass


def add_arguments(parser):
    parser.add_argument("--echo-times", type=int, default=1, help="how many times the echo peer repeats a prompt")


def opened(context, value):
    yield Echo(int(value or context.args.echo_times))


PEER = Peer("echo", "echo[=N] (the prompt, N times)", opened, order=90, rival=True, add_arguments=add_arguments)
'''

TASK = '[[task]]\nname = "hello"\nmax_tokens = 8\nprompt = "Say hello."\n'
TINY = Path(__file__).parents[2] / "profiles" / "tiny.toml"  # (a copy of the package has no bundled profiles)


def test_a_bench_peer_in_one_new_module_runs_beside_specchat(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(Path(specchat.__file__).parent, copy / "specchat", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "specchat" / "bench" / "peers" / "echo.py").write_text(ECHO)
    assert "echo" not in peers()  # only the copy has it
    tasks, out = tmp_path / "tasks.toml", tmp_path / "report.json"
    tasks.write_text(TASK)
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specchat", "bench", "--profile", str(TINY), "--repeat", "1",
                               "--tasks", str(tasks), "--json", str(out), *args],
                              capture_output=True, text=True, env=env, timeout=600)

    helped = subprocess.run([sys.executable, "-m", "specchat", "bench", "--help"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert "echo[=N]" in helped.stdout and "--echo-times" in helped.stdout
    run = bench("--peers", "echo=2")
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["peers"] == ["echo"] and report["rivals"] == ["echo x2"]
    echoed = [r for r in report["runs"] if r["runner"] == "echo x2"]
    assert [r["text"] for r in echoed] == ["Say hello. Say hello."] * 2  # the warm-up and one repetition
    assert {r["runner"] for r in report["summary"]} == {"specchat none", "specchat draft", "echo x2"}
    assert "echo x2" in run.stdout  # the table names it
    assert bench("--peers", "echo", "--echo-times", "3").returncode == 0
    assert {r["runner"] for r in json.loads(out.read_text())["runs"]} >= {"echo x3"}
