"""``specchat repl``: a line-based chat on prompt-toolkit for plain terminals, SSH, logged tmux panes, screen readers and
pipes, sharing the backend, profiles, chat session, store and telemetry with the full-screen app."""

from __future__ import annotations

from typing import Any

from .commands import PromptCompleter, run_command
from .shell import Commands, Repl, ReplSettings

__all__ = ["Repl", "ReplSettings", "make_repl"]


def make_repl(settings: ReplSettings, **options: Any) -> Repl:
    """The REPL with its slash commands (``shell.Repl``'s keyword options: input, output, text_out, interactive)."""
    return Repl(settings, Commands(run_command, PromptCompleter), **options)
