"""Key bindings: every one has an id, a description and a tooltip, and can be remapped in keymap.toml.

keymap.toml maps binding ids to keys, e.g. ``cancel = "escape,ctrl+c"``; ``specchat`` shows the ids in its F1 help.

The chat's keys are the app's (they work wherever the focus is, outrank the prompt's editing keys and show in one
order in the footer), and each names the region of the chat view that carries it out: ``on('chat', 'version(1)')``
runs the chat log's ``action_version(1)`` (``SpecchatApp.action_on``). The regions by id: ``chat-view`` (the chats as
a whole), ``main`` (the profile in use: switching, A/B), ``chat-column`` (a reply's life, inspecting it) and ``chat``
(the log: the selected message, its versions, how replies are drawn).
"""

from __future__ import annotations

from pathlib import Path

import tomlkit
from textual.app import App
from textual.binding import Binding
from tomlkit.exceptions import ParseError

from ..errors import ConfigError

APP_BINDINGS = [
    Binding("ctrl+q", "quit", "Quit", id="quit", tooltip="Leave specchat (chats are already saved)", priority=True),
    Binding("escape", "on('chat-column', 'cancel')", "Cancel", id="cancel", tooltip="Stop the reply being generated; it is kept, marked cancelled"),
    Binding("f1", "help", "Help", id="help", tooltip="Every key binding, and where to remap them"),
    Binding("f2", "on('main', 'profiles')", "Profiles", id="profiles", tooltip="Switch profile or draft model, reloading only what changed"),
    Binding("f3", "on('chat', 'toggle_markdown')", "Markdown", id="toggle_markdown", tooltip="Show the last reply as rendered Markdown or by provenance"),
    Binding("ctrl+g", "on('chat', 'toggle_ghosts')", "Ghosts", id="toggle_ghosts", tooltip="Show rejected draft tokens as struck-through ghost text"),
    Binding("ctrl+t", "on('main', 'toggle_speculation')", "Spec on/off", id="toggle_speculation", show=False, tooltip="Speculation off for the next messages, or back on: the same target decodes (in-process, its cache kept)"),
    Binding("f4", "on('main', 'previous_profile')", "Previous profile", id="previous_profile", show=False, tooltip="Back to the profile before the last switch (as cd -)"),
    Binding("f6", "on('main', 'draft_longer')", "Draft +1", id="draft_longer", show=False, tooltip="Draft one token more per step, from the next message"),
    Binding("f5", "on('main', 'draft_shorter')", "Draft -1", id="draft_shorter", show=False, tooltip="Draft one token less per step, from the next message"),
    *(Binding(f"alt+{n}", f"on('main', 'favourite({n})')", f"Favourite {n}", id=f"favourite_{n}", show=False,
              tooltip=f"Favourite profile {n} (the favourites list in settings.toml)") for n in range(1, 10)),
    Binding("f7", "on('main', 'suggested_profile')", "Suggested", id="suggested_profile", show=False, tooltip="Switch to the profile the sidebar suggests when speculation is slower than plain"),
    Binding("f8", "on('chat-column', 'inspect')", "Inspect", id="inspect", show=False, tooltip="A cursor over the reply tokens (arrows move, a click picks one): what decided each token"),
    Binding("f9", "on('chat-column', 'replay')", "Replay", id="replay", show=False, tooltip="Step through the inspected reply (or the last one): each draft, its verification, the figures then"),
    Binding("ctrl+b", "on('main', 'ab_compare')", "A/B", id="ab_compare", tooltip="Rerun the last prompt without speculation and compare"),
    Binding("ctrl+r", "on('chat-column', 'regenerate')", "Regenerate", id="regenerate", tooltip="Answer the last prompt again"),
    Binding("ctrl+y", "on('chat-column', 'copy_reply')", "Copy reply", id="copy_reply", tooltip="Copy the last reply to the clipboard"),
    Binding("ctrl+k", "on('chat', 'copy_code')", "Copy code", id="copy_code", tooltip="Copy a code block of the selected reply (or the last one): the only one, or one picked from a list"),
    Binding("alt+up", "on('chat', 'select_message(-1)')", "Message before", id="message_previous", show=False, tooltip="Select the message before: to edit, fork, delete, copy code from, or see its versions"),
    Binding("alt+down", "on('chat', 'select_message(1)')", "Message after", id="message_next", show=False, tooltip="Select the message after (past the last one: none)"),
    Binding("alt+left", "on('chat', 'version(-1)')", "Version before", id="version_previous", show=False, tooltip="Show the version before of the selected message (‹): another edit, another answer"),
    Binding("alt+right", "on('chat', 'version(1)')", "Version after", id="version_next", show=False, tooltip="Show the version after of the selected message (›)"),
    Binding("alt+e", "on('chat-column', 'edit_message')", "Edit", id="edit_message", show=False, tooltip="Edit the selected message (or your last one) in the prompt and send it again; the old version is kept"),
    Binding("alt+f", "on('chat-view', 'fork_chat')", "Fork", id="fork_chat", show=False, tooltip="A new chat with this one's messages up to the selected one (or all of them)"),
    Binding("alt+d", "on('chat', 'delete_message')", "Delete", id="delete_message", show=False, tooltip="Delete the selected message and every message after it (asks first)"),
    Binding("ctrl+n", "on('chat-view', 'new_chat')", "New chat", id="new_chat", tooltip="Start a new conversation"),
    Binding("ctrl+l", "on('chat-view', 'conversations')", "Chats", id="conversations", tooltip="Open, rename, delete or export conversations"),
    Binding("ctrl+e", "on('chat-view', 'export')", "Export", id="export", tooltip="Export this chat to Markdown and JSON"),
    Binding("ctrl+s", "on('chat-view', 'system_prompt')", "System", id="system_prompt", tooltip="Edit this chat's system prompt"),
]

INPUT_BINDINGS = [
    Binding("enter", "submit", "Send", id="send", tooltip="Send the message", show=False),
    Binding("ctrl+j", "newline", "Newline", id="newline", tooltip="Insert a line break (also Alt+Enter)", show=False),
    Binding("alt+enter", "newline", "Newline", id="newline_alt", tooltip="Insert a line break", show=False),
    Binding("up", "history_previous", "Earlier prompt", id="history_previous", tooltip="Recall an earlier prompt (on the first line)", show=False),
    Binding("down", "history_next", "Later prompt", id="history_next", tooltip="Recall a later prompt (on the last line)", show=False),
    Binding("tab", "complete", "Complete @file", id="complete_file", tooltip="Complete the @file before the cursor (a file to attach); elsewhere, the next widget", show=False),
]

# The token inspector's keys (while it has the focus) and the replay screen's.
INSPECTOR_BINDINGS = [
    Binding("left", "move(-1)", "Token before", id="inspect_previous", tooltip="The token before"),
    Binding("right", "move(1)", "Token after", id="inspect_next", tooltip="The token after"),
    Binding("up", "reply(-1)", "Reply before", id="inspect_reply_up", tooltip="The last token of the reply before"),
    Binding("down", "reply(1)", "Reply after", id="inspect_reply_down", tooltip="The last token of the reply after"),
    Binding("home", "edge(0)", "First token", id="inspect_first", show=False, tooltip="The reply's first token"),
    Binding("end", "edge(-1)", "Last token", id="inspect_last", show=False, tooltip="The reply's last token"),
    Binding("escape", "close", "Close", id="inspect_close", tooltip="Close the inspector; the prompt takes the keys"),
]

REPLAY_BINDINGS = [
    Binding("right", "step(1)", "Step after", id="replay_forward", tooltip="The next step of the reply"),
    Binding("left", "step(-1)", "Step before", id="replay_back", tooltip="The step before"),
    Binding("end", "edge(-1)", "Last step", id="replay_last", tooltip="The reply's last step"),
    Binding("home", "edge(0)", "First step", id="replay_first", tooltip="The prompt's prefill, before any step"),
    Binding("escape", "close", "Close", id="replay_close", tooltip="Back to the chat"),
]

# App shortcuts outrank the prompt's editing keys (TextArea also uses ctrl+e, ctrl+k, ctrl+y): they are global.
APP_BINDINGS = [
    Binding(b.key, b.action, b.description, show=b.show, id=b.id, tooltip=b.tooltip, priority=b.key != "escape")
    for b in APP_BINDINGS
]
ALL_BINDINGS = APP_BINDINGS + INPUT_BINDINGS


class BoundKeys:
    """The key bound to each binding id now: the app's, as its main screen has them (a keymap may have moved them),
    else the inspector's or the replay's as the keymap read at start has them."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.remapped: dict[str, str] = {}  # binding id → keys, from keymap.toml

    def of(self, binding_id: str) -> str:
        active = {b.binding.id: key for key, b in self.app.screen_stack[0].active_bindings.items() if b.binding.id}
        if binding_id in active:
            return active[binding_id]
        return self.remapped.get(binding_id) or next(b.key for b in ALL_BINDINGS + INSPECTOR_BINDINGS + REPLAY_BINDINGS
                                                     if b.id == binding_id)


def load_keymap(path: Path) -> dict[str, str]:
    """Binding id → keys from the user's keymap file; absent file means no changes."""
    if not path.is_file():
        return {}
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8")).unwrap()
    except (OSError, UnicodeDecodeError, ParseError) as exc:
        raise ConfigError(f"{path}: cannot read the keymap ({exc}) — fix or delete the file") from None
    table = document.get("keys", document)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [keys] must be a table of binding id = \"keys\" — see F1 for the ids")
    known = {b.id for b in ALL_BINDINGS + INSPECTOR_BINDINGS + REPLAY_BINDINGS}
    keymap = {}
    for binding_id, keys in table.items():
        if binding_id not in known:
            raise ConfigError(f"{path}: unknown binding id {binding_id!r} — see F1 for the ids")
        if not isinstance(keys, str) or not all(key.strip() for key in keys.split(",")):
            raise ConfigError(f"{path}: {binding_id} must be keys such as \"ctrl+x\" or \"ctrl+x,f5\", got {keys!r}")
        keymap[binding_id] = keys
    return keymap
