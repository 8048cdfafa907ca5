"""The package's structure, read from its source: the engine imports nothing above it (no arrow up), and no module
imports another that imports it back, directly or round a ring — at load time, inside a function or only for a type
checker (``if TYPE_CHECKING:``): a circle a type checker needs is a circle a reader walks (issue #49). An import made
inside a function runs when called, and only those named in ``LAZY`` may be (each for the start-up time it saves)."""

from __future__ import annotations

import ast
from pathlib import Path

import specchat

PACKAGE = Path(specchat.__file__).parent
BASE = {"specchat", "specchat.errors", "specchat.paths", "specchat.text", "specchat.discovery"}  # what every layer may use
LAZY = {  # the modules that import inside a function, and why
    "specchat.cli.ask", "specchat.cli.chat", "specchat.cli.chats", "specchat.cli.doctor", "specchat.cli.profiles",
    "specchat.cli.repl", "specchat.cli.replay", "specchat.cli.server",  # a command loads only what it runs: `specchat --help` stays quick
    "specchat.app.screens.modals",  # the draft search runs when the picker asks for it
    "specchat.bench.report", "specchat.bench.peers.llama_cpp_python",  # NVML and the CPU probe, for a run that needs them
    "specchat.engine.compat",  # llama.cpp's loader, only where a GGUF header cannot answer
    "specchat.profiles.models",  # deriving the embedded draft loads llama.cpp's quantizer, only when asked for
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(name: str) -> tuple[set[str], set[str], set[str]]:
    """What ``name`` imports when it loads, what inside functions, and what only for a type checker (specchat modules
    only)."""
    path, at_load, inside, typing_only = MODULES[name], set(), set(), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def targets(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            found = {alias.name for alias in node.names}
        else:
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
            found = {module} | {f"{module}.{alias.name}" for alias in node.names}
        # a module's own packages are loaded before it: importing from them closes no circle
        return {t for t in found if t in MODULES and t != name and not name.startswith(t + ".")}

    def visit(nodes: list[ast.stmt], in_function: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        typing_only.update(targets(inner))
                visit(node.orelse, in_function)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                (inside if in_function else at_load).update(targets(node))
                continue
            nested = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    visit(block, nested)
            for handler in getattr(node, "handlers", []):
                visit(handler.body, nested)

    visit(ast.parse(path.read_text()).body, False)
    return at_load, inside, typing_only


def test_the_engine_imports_nothing_above_it():
    up = {name: sorted(t for t in at_load | inside if not t.startswith("specchat.engine") and t not in BASE)
          for name in MODULES if name.startswith("specchat.engine")
          for at_load, inside, _typing in [imports(name)]}
    assert {name: found for name, found in up.items() if found} == {}


def rings(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other round a ring (Tarjan's strongly connected components of two or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while (w := stack.pop()) != v:
                ring.append(w)
            if ring:
                found.append(sorted([v, *ring]))

    for name in graph:
        if name not in index:
            strong(name)
    return found




def test_no_module_imports_itself_back():
    assert rings({name: set().union(*imports(name)) for name in MODULES}) == []


def test_imports_inside_functions_are_only_the_listed_ones():
    lazy = {name for name in MODULES if imports(name)[1]}
    assert lazy == LAZY


def test_the_checks_see_what_they_look_for():
    """The reader finds a real import, and the ring finder the ring the REPL's shell and commands once made (the
    commands are given to the shell now: ``repl.make_repl``)."""
    assert "specchat.backends.run_config" in imports("specchat.backends.local")[0]
    assert "specchat.repl.commands" in imports("specchat.repl")[0]
    assert "specchat.engine.llama" in imports("specchat.engine.chat_template")[2]  # under TYPE_CHECKING
    assert rings({"shell": {"commands"}, "commands": {"shell", "render"}, "render": set()}) == [["commands", "shell"]]
