"""The benchmark seam, read from the source with ``ast`` (issue #49): benchmarks/ scripts import only the package (no
other script by bare name, nothing of the CLI's, no ``sys.path`` pushed), and no test imports a benchmark script —
what scripts and tests share (Spec-Bench's data, the simulations, the task options) lives in ``specchat.bench``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPTS = {str(path.relative_to(ROOT)): ast.parse(path.read_text()) for path in sorted((ROOT / "benchmarks").rglob("*.py"))}
TESTS = {str(path.relative_to(ROOT)): path.read_text() for path in sorted((ROOT / "tests").rglob("*.py"))}
THIRD_PARTY = {"llama_cpp", "numpy", "textual", "rich", "prompt_toolkit", "pytest", "scipy", "matplotlib", "tiktoken",
               "pynvml", "gguf", "tomlkit", "jinja2", "httpx", "openai"}
STILL_REACHING: set[str] = set()  # scripts that still reach past the package (issue #49 emptied it)


def reaches(tree: ast.Module) -> list[str]:
    """What a script imports that is neither the standard library, a dependency, nor the package outside its CLI —
    and any ``sys.path`` it changes."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path":
            found.append(f"{node.lineno}: sys.path")
            continue
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if name.startswith("specchat.cli") or not (top == "specchat" or top in sys.stdlib_module_names
                                                         or top in THIRD_PARTY):
                found.append(f"{node.lineno}: {name}")
    return found


def test_benchmark_scripts_import_only_the_package_but_those_still_listed():
    reaching = {path for path, tree in SCRIPTS.items() if reaches(tree)}
    assert reaching == STILL_REACHING, {path: reaches(SCRIPTS[path]) for path in reaching ^ STILL_REACHING}


def test_no_test_imports_a_benchmark_script():
    importing = {path for path, text in TESTS.items() if path != "tests/structure/test_benchmarks.py"
                 and ("spec_from_file_location" in text or '/ "benchmarks"' in text and "sys.path" in text)}
    assert importing == set()


def test_the_checks_see_what_they_look_for():
    tree = ast.parse("import sys\nsys.path.insert(0, 'x')\nfrom ngram_simulation import ORACLE\n"
                     "from specchat.cli.bench import add_task_options\nfrom specchat.bench.simulation import ngram\n")
    assert sorted(reaches(tree)) == ["2: sys.path", "3: ngram_simulation", "4: specchat.cli.bench"]
