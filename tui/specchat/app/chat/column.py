"""The chat column — the log, the token inspector, the legend and the prompt — and a reply's life in it: a message sent
(held while the model loads, refused while the app is busy, or sent in place of the message being edited), its
exchange answered by ``chats.replies.Replies``, each frame drawn, a failure shown and undone, Esc; regenerating,
copying, inspecting and replaying a reply.

On the UI's own clock (``FRAME_S``) the column takes the reply's next frame — its events already in the record and
telemetry — as a ``FrameArrived`` message, and draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message

from ...chats.controller import ChatController
from ...chats.exchange import Exchange, Failure
from ...chats.replay import NO_TRACE
from ...chats.replies import Activity, Frame
from ...errors import SpecchatError
from ...figures import DASH
from ..jobs import Jobs
from ..keymap import BoundKeys
from ..priority import settle_garbage
from ..screens.replay_screen import ReplayScreen
from .inspector import Inspector
from .log import ChatLog
from .prompt import PromptInput
from .reply import Legend, ProvenanceLines, ReplyView, legend

# On a CPU the UI competes with llama.cpp's threads for the same cores: every redraw costs decode speed, about one
# for one. Tokens and the sidebar are therefore refreshed together, five times a second (the sidebar must lag by
# less than 250 ms), on the UI's own clock.
FRAME_S = 0.2


class ChatColumn(Vertical):
    class FrameArrived(Message):
        """A reply's events of one frame, in its record and telemetry already (``Replies.frame``)."""

        bubble = False  # five a second while a reply streams: the column draws them, nobody above it

        def __init__(self, frame: Frame) -> None:
            super().__init__()
            self.frame = frame

    def __init__(self, controller: ChatController, jobs: Jobs, keys: BoundKeys, max_paste: int,
                 drawn: Callable[[bool], None]) -> None:
        """``drawn``: told when the reply on screen moved on (a frame, its end, its failure), and whether it is over
        — the sidebar's figures move with it."""
        super().__init__(id="chat-column")
        self.controller, self.jobs, self.drawn = controller, jobs, drawn
        self.inspector = Inspector(lambda: list(self.query("ReplyView, UserMessage")), lambda: self.prompt.focus())
        self.chat_log = ChatLog(controller, jobs, keys, self.inspector)
        self.prompt = PromptInput(max_paste=max_paste)

    def compose(self) -> ComposeResult:
        yield self.chat_log
        yield self.inspector
        yield Legend(legend(), id="legend")
        yield self.prompt

    def on_mount(self) -> None:
        self.frame_timer = self.set_interval(FRAME_S, self._next_frame, pause=True)

    # -- a message sent ------------------------------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    def send(self, message: PromptInput.Submitted) -> None:
        self.submit(message.text)

    @on(PromptInput.FilesFound)
    def files_found(self, message: PromptInput.FilesFound) -> None:
        if not message.found:
            self.notify(f"{message.word}: no file starts so in {Path.cwd()}", severity="warning")
            return
        shown = " · ".join(message.found[:12]) + (" …" if len(message.found) > 12 else "")
        self.notify(f"{message.word}… {shown}", timeout=8)

    @on(PromptInput.PasteRefused)
    def paste_refused(self, message: PromptInput.PasteRefused) -> None:
        self.notify(f"paste of {message.size:,} characters refused (limit {message.limit:,}) — attach less text",
                    severity="warning")

    def submit(self, text: str) -> None:
        if not text.strip():
            return
        if self.jobs.busy is Activity.LOADING and self.prompt.editing is None:
            self.prompt.hold(text)  # sent once the model is loaded (``send_waiting``)
            return
        why = self.jobs.why_busy() or self.controller.switcher.why_not_send()
        if why:
            self.notify(why, severity="warning")
            self.prompt.load_text(text)
            return
        index = self.prompt.take_edit()
        try:
            exchange = self.controller.begin(text) if index is None else self.controller.edit(index, text)
        except SpecchatError as exc:  # refused before anything changed (a file that cannot be attached)
            self.notify(str(exc), severity="warning", timeout=10)
            self.prompt.load_text(text)
            self.prompt.editing = index  # still an edit, to change
            return
        if index is not None:
            self.jobs.say("")
            self.chat_log.select(None)
        self.start_exchange(exchange)

    def send_waiting(self) -> None:
        """The load ended: a message held while it ran is sent now (when a model is there to answer it)."""
        if not self.is_attached or not self.prompt.waiting:  # a load that ended as the app quit, its widgets gone
            return
        text = self.prompt.release()
        if self.controller.switcher.why_not_send() is None:
            self.prompt.clear()
            self.submit(text)
        else:
            self.notify("the message waiting was not sent: no model is loaded — it is in the prompt",
                        severity="warning", timeout=10)

    def action_edit_message(self) -> None:
        if not self.jobs.idle_or_say(self.notify):
            return
        index = self.chat_log.chosen(user_only=True)
        if index is None:
            self.notify("nothing of yours to edit yet — ask something first", severity="warning")
            return
        self.prompt.begin_edit(index, self.controller.session.turns[index].text)
        self.jobs.say(f"editing message {index + 1}: Enter sends it in its place (the old version is kept), Esc"
                      " leaves it as it was")

    def cancel_edit(self) -> bool:
        """The prompt holds what it held before the edit; False when no edit is in progress."""
        if not self.prompt.cancel_edit():
            return False
        self.jobs.say("")
        return True

    # -- the reply -----------------------------------------------------------------------------------------------------

    def start_exchange(self, exchange: Exchange) -> None:
        """Show the exchange the controller began, then have it answered (``Replies.answer``)."""
        self.chat_log.show_new_turns()
        self.streaming(True)
        self.jobs.set(Activity.GENERATING, "")
        self.jobs.replies.answer(exchange)

    def streaming(self, on: bool) -> None:
        """Frames run while a reply streams; the prompt's cursor stops blinking then, since each blink is a frame."""
        if on:
            self.frame_timer.resume()
        else:
            self.frame_timer.pause()
        self.prompt.cursor_blink = not on

    def _next_frame(self) -> None:
        frame = self.jobs.replies.frame()
        if frame is not None:
            self.post_message(self.FrameArrived(frame))

    def on_chat_column_frame_arrived(self, message: FrameArrived) -> None:
        frame = message.frame
        if frame.failure is not None:
            self._reply_failed(frame.failure)
            return
        view = self.chat_log.last_reply
        if view is not None:
            view.refresh_view()
            if frame.finished is not None:
                view.set_markdown(self.chat_log.markdown)
        if frame.finished is None:
            self.drawn(False)
        else:
            self.streaming(False)
            self.jobs.done()
            self.drawn(True)
            settle_garbage()  # after memory was read: as after a load
        self.chat_log.follow()

    def _reply_failed(self, failure: Failure) -> None:
        """The backend stopped the reply with an error (what it said before, e.g. a trimmed context, still counts)."""
        self.streaming(False)
        text = self.controller.failed(failure)
        if not failure.started:  # refused before it began: the chat as it was (an edit's versions too) …
            self.chat_log.show_turns()
            if text is not None:  # … and what was typed goes back to the prompt (still an edit, if it was one)
                self.prompt.load_text(text)
                self.prompt.editing = self.prompt.edit_sent
        elif self.chat_log.last_reply is not None:
            self.chat_log.last_reply.refresh_view()
        self.notify(failure.error, severity="error", timeout=15)
        self.jobs.done()
        self.drawn(True)

    def action_cancel(self) -> None:
        """Esc: stops the reply (or A/B) in progress, or withdraws a message waiting for the model (it stays in the
        prompt); else leaves an edit as it was, else clears the selection."""
        if self.prompt.waiting:
            self.prompt.release()
            self.notify("withdrawn: it stays in the prompt, not sent")
        elif self.jobs.busy in (Activity.GENERATING, Activity.COMPARING):
            self.jobs.replies.cancel()
        elif not self.cancel_edit() and self.chat_log.selected is not None:
            self.chat_log.select(None)

    def action_regenerate(self) -> None:
        if self.jobs.busy is not None or self.controller.backend is None:
            return
        try:
            exchange = self.controller.regenerate()
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.start_exchange(exchange)

    def action_copy_reply(self) -> None:
        record = self.controller.session.last_reply
        if record is not None and record.text:
            self.app.copy_to_clipboard(record.text)
            self.notify("reply copied to the clipboard")

    # -- inspecting and replaying --------------------------------------------------------------------------------------

    def action_inspect(self) -> None:
        views = [v for v in self.query(ReplyView) if v.segments]
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
        replies = list(self.query(ReplyView))
        view = inspected or next((v for v in reversed(replies) if v.segments), None)
        if view is None or view.record.streaming:
            self.notify("no finished reply to replay yet — ask something first", severity="warning")
            return
        if not view.record.trace:
            self.notify(NO_TRACE, severity="warning")
            return
        title = f"reply {replies.index(view) + 1} of {len(replies)}"
        try:
            screen = ReplayScreen(view.record, view.record.profile or DASH, title)  # the profile it ran under
        except ValueError as exc:  # a damaged trace
            self.notify(str(exc), severity="warning")
            return
        self.app.push_screen(screen)
