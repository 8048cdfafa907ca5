"""A new backend is one module (docs/extending.md: "Adding a backend"): a module dropped into ``backends/`` that defines
``KIND`` is a ``[backend] kind`` profiles name, that opens, switches and is checked by its capabilities — and the whole
conformance suite runs on it, held to the expectations of the kind its capabilities make it like. The module goes into
a copy of the package, run in its own process, so the source tree is not touched."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import specchat
from specchat.backends.run_config import backend_kinds

SECOND_ENGINE = '''
"""specchat's engine in this process under a kind of its own: what a backend module holds, and nothing else."""

from specchat.backends.run_config import BackendKind
from specchat.backends.local import LocalBackend


class SecondEngine(LocalBackend):
    where = "in-process, a second kind (a module a test dropped in)"


KIND = BackendKind("second-engine", "second engine", SecondEngine, runs_engine=True)
'''

SUITE = Path(__file__).with_name("test_conformance.py")
ROOT = Path(__file__).parents[2]


def conformance_tests() -> set[str]:
    """The conformance suite's tests that run on every kind (those that take the ``kind`` or ``profile`` fixture)."""
    tree = ast.parse(SUITE.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and {"kind", "profile"} & {arg.arg for arg in node.args.args}}


def test_a_backend_in_one_new_module_passes_the_conformance_suite(tmp_path, llama_server):
    copy = tmp_path / "copy"
    shutil.copytree(Path(specchat.__file__).parent, copy / "specchat", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "specchat" / "backends" / "second_engine.py").write_text(SECOND_ENGINE)
    assert "second-engine" not in backend_kinds()  # only the copy has it

    env = {**os.environ, "PYTHONPATH": str(copy), "SPECCHAT_CONFORMANCE_BACKEND": "second-engine",
           "SPECCHAT_LLAMA_SERVER": str(llama_server)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "0",
                          str(SUITE)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:]
    outcomes = dict(re.findall(r"::(test_\w+)\[second-engine-as-in-process\] (PASSED|SKIPPED|FAILED)", run.stdout))
    assert set(outcomes) == conformance_tests(), run.stdout[-4000:]
    # in-process, a server is not there to kill: every other promise was kept, none skipped
    assert {name for name, outcome in outcomes.items() if outcome != "PASSED"} == {"test_a_server_killed_mid_reply"}
