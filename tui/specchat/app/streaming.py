"""The app's replies: a message sent (or refused while the app is busy), its exchange answered by ``Replies``, each
frame of it drawn, a failure shown and undone, and Esc.

A mixin of ``SpecchatApp``: on the UI's own clock (``chat_app.FRAME_S``) the app takes the reply's next frame —
its events already in the record and telemetry — as a ``FrameArrived`` message, and draws it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..chats.exchange import Exchange, Failure
from ..chats.replies import Activity
from ..errors import SpecchatError
from .priority import settle_garbage
from .host import MixinBase
from .widgets.prompt import PromptInput

if TYPE_CHECKING:
    from .chat_app import SpecchatApp

EXIT_WAIT_S = 60.0  # every long operation stops when cancelled; this only bounds a backend that hangs outright


class ReplyStreaming(MixinBase):
    """Mixed into ``SpecchatApp`` (its ``controller``, ``replies``, ``busy``, views and sidebar)."""

    def submit(self, text: str) -> None:
        if not text.strip():
            return
        if self.busy is Activity.LOADING and self.editing is None:
            self.query_one(PromptInput).hold(text)  # sent once the model is loaded (``send_waiting``)
            return
        why = self.why_busy() or self.controller.switcher.why_not_send()
        if why:
            self.notify(why, severity="warning")
            self.query_one(PromptInput).load_text(text)
            return
        self.edit_sent = None
        if self.send_edit(text):
            return
        try:
            exchange = self.controller.begin(text)
        except SpecchatError as exc:  # refused before anything changed (a file that cannot be attached)
            self.notify(str(exc), severity="warning", timeout=10)
            self.query_one(PromptInput).load_text(text)
            return
        self.start_exchange(exchange)

    def send_waiting(self) -> None:
        """The load ended: a message held while it ran is sent now (when a model is there to answer it)."""
        prompt = next(iter(self.query(PromptInput)), None)
        if prompt is None or not prompt.waiting:  # None: a load that ended as the app quit, its widgets gone
            return
        text = prompt.release()
        if self.controller.switcher.why_not_send() is None:
            prompt.clear()
            self.submit(text)
        else:
            self.notify("the message waiting was not sent: no model is loaded — it is in the prompt",
                        severity="warning", timeout=10)

    def why_busy(self) -> str | None:
        if self.busy is Activity.LOADING:
            return "the model is still loading — try again in a moment"
        if self.busy is not None:
            return "still answering — press Esc to cancel first"
        return None

    def start_exchange(self, exchange: Exchange) -> None:
        """Show the exchange the controller began, then have it answered (``Replies.answer``)."""
        self.forget_views()
        for turn in self.session.turns[-2:]:
            if id(turn) not in self.views:
                self.mount_turn(turn)
        self.chat.scroll_end(animate=False)
        self._streaming(True)
        self.set_job(Activity.GENERATING, "")
        self.replies.answer(exchange)

    def _streaming(self, on: bool) -> None:
        """Frames run while a reply streams; the prompt's cursor stops blinking then, since each blink is a frame."""
        if on:
            self.frame_timer.resume()
        else:
            self.frame_timer.pause()
        self.query_one(PromptInput).cursor_blink = not on

    def _next_frame(self) -> None:
        frame = self.replies.frame()
        if frame is not None:
            self.post_message(self.FrameArrived(frame))

    def on_specchat_app_frame_arrived(self, message: SpecchatApp.FrameArrived) -> None:
        frame = message.frame
        if frame.failure is not None:
            self._reply_failed(frame.failure)
            return
        view = self.last_reply
        if view is not None:
            view.refresh_view()
            if frame.finished is not None:
                view.set_markdown(self.markdown)
        if frame.finished is not None:
            self._streaming(False)
            self.job_done()
            self.sample_memory()
            settle_garbage()
        self.refresh_sidebar()
        self.follow_chat()

    def _reply_failed(self, failure: Failure) -> None:
        """The backend stopped the reply with an error (what it said before, e.g. a trimmed context, still counts)."""
        self._streaming(False)
        text = self.controller.failed(failure)
        if not failure.started:  # refused before it began: the chat as it was (an edit's versions too) …
            self.show_turns()
            if text is not None:  # … and what was typed goes back to the prompt (still an edit, if it was one)
                self.query_one(PromptInput).load_text(text)
                self.editing = self.edit_sent
        elif self.last_reply is not None:
            self.last_reply.refresh_view()
        self.notify(failure.error, severity="error", timeout=15)
        self.sample_memory()
        self.job_done()
        self.refresh_sidebar()

    def action_cancel(self) -> None:
        """Esc: stops the reply (or A/B) in progress, or withdraws a message waiting for the model (it stays in the
        prompt); else leaves an edit as it was, else clears the selection."""
        prompt = self.query_one(PromptInput)
        if prompt.waiting:
            prompt.release()
            self.notify("withdrawn: it stays in the prompt, not sent")
        elif self.busy in (Activity.GENERATING, Activity.COMPARING):
            self.replies.cancel()
        elif not self.cancel_edit() and self.selected is not None:
            self.selected = None
            self.show_selection()
