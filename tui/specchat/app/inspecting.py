"""The app's token inspector and step replay: which reply and token they open on, and the keys that open them.

Kept apart from ``chat_app`` (a mixin of ``SpecchatApp``): both only read the chat's records, never the backend.
"""

from __future__ import annotations

from ..chats.replay import NO_TRACE
from ..figures import DASH
from .host import MixinBase
from .replay_screen import ReplayScreen
from .widgets.inspector import Inspector
from .widgets.prompt import PromptInput
from .widgets.reply import ProvenanceLines, ReplyView


class InspectingActions(MixinBase):
    """Mixed into ``SpecchatApp`` (which has ``query``, ``notify``, ``push_screen`` and the conversation)."""

    def reply_views(self) -> list[ReplyView]:
        return list(self.query(ReplyView))

    @property
    def inspector(self) -> Inspector:
        return self.query_one(Inspector)

    def new_inspector(self) -> Inspector:
        return Inspector(lambda: list(self.query("ReplyView, UserMessage")), lambda: self.query_one(PromptInput).focus())

    def action_inspect(self) -> None:
        views = [v for v in self.reply_views() if v.segments]
        if not views:
            self.notify("no reply to inspect yet — ask something first", severity="warning")
            return
        if self.inspector.display and self.inspector.view is not None:
            self.inspector.action_close()
            return
        self.inspector.open(views[-1])

    def on_provenance_lines_token_clicked(self, message: ProvenanceLines.TokenClicked) -> None:
        view = next((a for a in message.control.ancestors if isinstance(a, ReplyView)), None)
        if view is not None:
            self.inspector.open(view, message.index)

    def action_replay(self) -> None:
        inspected = self.inspector.view if self.inspector.display and self.inspector.view is not None \
            and self.inspector.view.is_attached else None
        view = inspected or next((v for v in reversed(self.reply_views()) if v.segments), None)
        if view is None or view.record.streaming:
            self.notify("no finished reply to replay yet — ask something first", severity="warning")
            return
        if not view.record.trace:
            self.notify(NO_TRACE, severity="warning")
            return
        replies = self.reply_views()
        title = f"reply {replies.index(view) + 1} of {len(replies)}"
        try:
            screen = ReplayScreen(view.record, view.record.profile or DASH, title)  # the profile it ran under
        except ValueError as exc:  # a damaged trace
            self.notify(str(exc), severity="warning")
            return
        self.push_screen(screen)
