"""Size limits, read from the source with ``ast`` (issue #49): a module a newcomer can read in one sitting, a function
that fits on a screen, a class with one job — and the frameworks through their public API, except in the one adapter
each that says why it reaches inside."""

from __future__ import annotations

import ast
from pathlib import Path

import specchat

PACKAGE = Path(specchat.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
MAX_CLASS_METHODS = 30
ENGINE_ROOMS = ("engine/core.py", "engine/loading.py", "engine/stored_index.py", "engine/reply_run.py")  # each < 300
# The one module allowed to reach past each framework's public API, and why.
ADAPTERS = {
    "app/terminal_input.py": "Textual: its Linux driver's UTF-8 decoder, replaced so bad bytes cannot kill the app",
    "engine/llama.py": "llama-cpp-python: the low-level C API (batches, logits rows, KV cache) the loop needs",
}
STANDARD_PRIVATE = {"_SubParsersAction", "_exit"}  # argparse's subparsers type, os._exit: documented and stable


def sources() -> dict[str, ast.Module]:
    return {str(path.relative_to(PACKAGE)): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


SOURCES = sources()


def lines(path: str) -> int:
    return (PACKAGE / path).read_text().count("\n")


def test_no_module_is_over_400_lines():
    assert {path: n for path in SOURCES if (n := lines(path)) > MAX_MODULE_LINES} == {}


def test_the_engine_is_split_by_job_each_room_under_300_lines():
    assert {path: lines(path) for path in ENGINE_ROOMS if lines(path) >= 300} == {}


def test_no_function_is_over_50_lines():
    long = {f"{path}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
            for path, tree in SOURCES.items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES}
    assert long == {}


def test_no_class_has_over_30_methods():
    big = {f"{path} {node.name}": methods for path, tree in SOURCES.items() for node in ast.walk(tree)
           if isinstance(node, ast.ClassDef)
           and (methods := sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body))
           > MAX_CLASS_METHODS}
    assert big == {}


def test_the_app_is_widgets_not_mixins():
    """Every class of the app derives from one class — a Textual widget, screen or message, or one of its own — so
    its state is its own (issue #49: the app was one class in six, sharing state through ``self``). The one shared
    base is ``TextLines``, how the reply and the sidebar draw their lines; and no protocol re-declares the App's API
    for them to share (the ``AppHost`` that was)."""
    mixed = {f"{path} {node.name}": [ast.unparse(base) for base in node.bases]
             for path, tree in SOURCES.items() if path.startswith("app/") for node in ast.walk(tree)
             if isinstance(node, ast.ClassDef) and len(node.bases) > 1
             and not (len(node.bases) == 2 and ast.unparse(node.bases[0]) == "TextLines")}
    assert mixed == {}
    protocols = [f"{path} {node.name}" for path, tree in SOURCES.items() if path.startswith("app/")
                 for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                 and any(ast.unparse(base).endswith("Protocol") for base in node.bases)]
    assert protocols == []


def private_reaches(tree: ast.Module, ours: set[str]) -> list[str]:
    """Private names used from outside: ``x._name`` on anything but ``self``/``cls`` and ``from m import _name``,
    where ``_name`` is defined nowhere in the package (so it is a framework's, or the standard library's)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            name = node.attr
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            name = next((a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")), "")
        else:
            continue
        if name and name not in ours and name not in STANDARD_PRIVATE:
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def defined_names() -> set[str]:
    ours: set[str] = set()
    for tree in SOURCES.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
    return ours


def test_frameworks_only_through_their_public_api_outside_their_adapter():
    ours = defined_names()
    reaches = {path: found for path, tree in SOURCES.items() if path not in ADAPTERS
               and (found := private_reaches(tree, ours))}
    assert reaches == {}


def test_the_checks_see_what_they_look_for():
    """A private reach into Textual is found, a long function and a big class are counted."""
    tree = ast.parse("from textual.app import _private\nx = app._driver\nself._mine = 1\n")
    assert private_reaches(tree, {"_mine"}) == ["1: from textual.app import _private", "2: app._driver"]
    body = "\n".join(f"    x{i} = {i}" for i in range(51))
    function = ast.parse(f"def f():\n{body}\n").body[0]
    assert function.end_lineno - function.lineno + 1 == 52
