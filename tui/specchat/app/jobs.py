"""What the backend's worker thread is doing for the app, and the line the sidebar shows about it.

One job at a time: a message sent between two loads would meet the wrong backend, so every region asks ``why_busy``
before it starts one. The worker itself is ``chats.replies.Replies``; this only says what it was given to do.
"""

from __future__ import annotations

from collections.abc import Callable

from ..chats.replies import Activity, Replies


class Jobs:
    """The app's one job in flight (``busy``: None when idle) and its status line (loading…, an edit in progress, a
    failed load); ``changed`` is told whenever either changes, once for both."""

    def __init__(self, replies: Replies, changed: Callable[[], None]) -> None:
        self.replies = replies
        self.busy: Activity | None = None
        self.status = ""
        self.changed = changed

    def run(self, activity: Activity, status: str, job: Callable[[], None]) -> None:
        """Run ``job`` on the backend's worker thread; it posts its own result (or the app hears it raised)."""
        self.set(activity, status)
        self.replies.submit(job)

    def done(self) -> None:
        self.set(None, "")

    def set(self, activity: Activity | None, status: str) -> None:
        if (activity, status) != (self.busy, self.status):
            self.busy, self.status = activity, status
            self.changed()

    def say(self, status: str) -> None:
        """Another status line for the job in flight (or for none: an edit in progress)."""
        self.set(self.busy, status)

    def why_busy(self) -> str | None:
        if self.busy is Activity.LOADING:
            return "the model is still loading — try again in a moment"
        if self.busy is not None:
            return "still answering — press Esc to cancel first"
        return None

    def idle_or_say(self, notify: Callable[..., object]) -> bool:
        """Whether a new job may start; if not, ``notify`` (a widget's) says why, as a warning."""
        why = self.why_busy()
        if why:
            notify(why, severity="warning")
        return why is None
