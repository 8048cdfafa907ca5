"""The provenance colours, in one place for every front end: Rich styles (the app), ANSI codes (``ask``, the REPL).

accepted — a draft token the target agreed with: green; corrected — the target's token where it rejected a draft
token: amber; bonus — the extra target token after a fully accepted draft: blue; target — plain output: the terminal's
own colour. A rejected draft tail (a ghost) is dim and struck through, so a reader can skip it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine.events import TokenKind


@dataclass(frozen=True)
class Provenance:
    """How every front end shows one kind of token."""

    style: str  # Rich style (the app)
    sgr: str  # ANSI SGR parameters (ask, the REPL): the 256-colour palette's nearest to ``style``
    label: str  # the legend's word
    name: str  # what the inspector and the replay call such a token


# The one place the four kinds are spelled out for people: the legend, the inspector, the replay, ask and the REPL.
PROVENANCE: dict[TokenKind, Provenance] = {
    TokenKind.ACCEPTED: Provenance("green", "32", "accepted draft", "accepted draft token"),
    TokenKind.CORRECTED: Provenance("#ffaf00", "38;5;214", "correction", "the target's correction"),
    TokenKind.BONUS: Provenance("#5fafff", "38;5;75", "bonus", "the target's bonus token"),
    TokenKind.TARGET: Provenance("", "", "target", "plain target token"),
}
GHOST_STYLE = "dim strike"
STYLES = {kind: shown.style for kind, shown in PROVENANCE.items()}
ANSI = {kind: f"\x1b[{shown.sgr}m" if shown.sgr else "" for kind, shown in PROVENANCE.items()} | {"dim": "\x1b[2m"}
ANSI_GHOST = "\x1b[2;9m"
ANSI_RESET = "\x1b[0m"


def ansi(text: str, kind: str) -> str:
    """``text`` in the colour of its provenance ``kind`` (unchanged for plain target output)."""
    code = ANSI.get(kind, "")
    return f"{code}{text}{ANSI_RESET}" if code else text
