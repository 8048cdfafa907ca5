"""A chat exported to Markdown (to read) and JSON (every token's provenance and the reply telemetry, to analyse).

Exports are written readable by their owner only, like the database they come from.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .records import ReplyRecord
from .session import ChatSession, _stored
from .store import DIR_MODE, FILE_MODE, private


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    private(path, FILE_MODE)


def export(session: ChatSession, directory: Path) -> list[Path]:
    """Write the chat as ``chat-<id>-<title>.md`` and ``.json`` in ``directory``; returns both paths."""
    slug = re.sub(r"[^a-z0-9]+", "-", session.title.lower()).strip("-")[:40] or "chat"
    directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    base = directory / f"chat-{session.id if session.id is not None else 'unsaved'}-{slug}"
    md = [f"# {session.title or 'chat'}", "", f"*profile {session.profile}*", ""]
    if session.system_prompt:
        md += [f"> system: {session.system_prompt}", ""]
    for turn in session.turns:
        note = f" ({turn.finish_reason})" if isinstance(turn, ReplyRecord) and turn.finish_reason not in (None, "stop") else ""
        md += [f"## {turn.role}{note}", "", turn.text, ""]
    md_path, json_path = base.with_suffix(".md"), base.with_suffix(".json")
    _write_private(md_path, "\n".join(md))
    _write_private(json_path, json.dumps({
        "title": session.title, "profile": session.profile, "system_prompt": session.system_prompt,
        "messages": [vars(_stored(turn)) for turn in session.turns],
    }, indent=1))
    return [md_path, json_path]
