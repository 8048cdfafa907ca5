"""The provenance colours, in one place for every front end: Rich styles (the app), ANSI codes (``ask``, the REPL).

accepted — a draft token the target agreed with: green; corrected — the target's token where it rejected a draft
token: amber; bonus — the extra target token after a fully accepted draft: blue; target — plain output: the terminal's
own colour. A rejected draft tail (a ghost) is dim and struck through, so a reader can skip it.
"""

from __future__ import annotations

# kind → (Rich style, ANSI SGR parameters): the same colours, the 256-colour palette's nearest for the ANSI ones.
PROVENANCE = {
    "accepted": ("green", "32"),
    "corrected": ("#ffaf00", "38;5;214"),
    "bonus": ("#5fafff", "38;5;75"),
    "target": ("", ""),
}
GHOST_STYLE = "dim strike"
STYLES = {kind: style for kind, (style, _) in PROVENANCE.items()}
ANSI = {kind: f"\x1b[{code}m" if code else "" for kind, (_, code) in PROVENANCE.items()} | {"dim": "\x1b[2m"}
ANSI_GHOST = "\x1b[2;9m"
ANSI_RESET = "\x1b[0m"


def ansi(text: str, kind: str) -> str:
    """``text`` in the colour of its provenance ``kind`` (unchanged for plain target output)."""
    code = ANSI.get(kind, "")
    return f"{code}{text}{ANSI_RESET}" if code else text
