"""The app's mixins declare what they use of the app (``app/host.py``): every ``self.`` name in a mixin is the mixin's
own or a member of ``AppHost`` — so a reader following ``self.controller`` from ``app/streaming.py`` finds it declared,
typed, in one place — and every member ``AppHost`` declares is one the app really has."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from specchat.app import host
from specchat.app.chat_app import SpecchatApp
from specchat.app.settings import Settings

APP = Path(host.__file__).parent
MIXINS = ("streaming", "switching", "chat_actions", "editing", "inspecting")


def declared_in(cls: ast.ClassDef) -> set[str]:
    names = {node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def mixin(name: str) -> ast.ClassDef:
    tree = ast.parse((APP / f"{name}.py").read_text())
    return next(node for node in tree.body if isinstance(node, ast.ClassDef))


def used_on_self(cls: ast.ClassDef) -> set[str]:
    return {node.attr for node in ast.walk(cls)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"}


def host_members() -> set[str]:
    return declared_in(next(node for node in ast.parse(Path(host.__file__).read_text()).body
                            if isinstance(node, ast.ClassDef) and node.name == "AppHost"))


def test_every_name_a_mixin_uses_on_self_is_its_own_or_the_hosts():
    members = host_members()
    for name in MIXINS:
        cls = mixin(name)
        undeclared = used_on_self(cls) - declared_in(cls) - members
        assert not undeclared, f"app/{name}.py uses self.{', self.'.join(sorted(undeclared))}: declare it in AppHost"
        assert [base.id for base in cls.bases if isinstance(base, ast.Name)] == ["MixinBase"], name


def assigned_on_self(path: Path) -> set[str]:
    return {target.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name) and target.value.id == "self"}


def test_the_app_has_every_member_the_host_declares():
    """Defined by a class the app is made of (its own, a mixin, the controller's views, Textual's App), or set on it
    by the app's code (``self.frame_timer`` once mounted)."""
    app = SpecchatApp(Settings())
    missing = {name for name in host_members()
               if not any(name in vars(cls) or name in inspect.get_annotations(cls) for cls in type(app).__mro__)
               and name not in vars(app) and name not in assigned_on_self(APP / "chat_app.py")}
    assert not missing, missing
