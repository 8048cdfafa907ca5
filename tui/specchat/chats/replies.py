"""The one owner of a reply below the front ends: the backend's worker thread, the inbox its events wait in, the
frames they are handed up in, a failure, Esc and a quit mid-reply.

Every call into the backend runs on one long-lived worker thread, the same for a front end's whole life: llama.cpp
keeps a team of compute threads per calling thread (OpenMP), and a model loaded on one thread and decoded on another
made a second team that fought the first for the cores (the draft's one-token decodes ran at half speed). A reply's
events are appended to an inbox there — the worker never waits on a front end — and a front end takes them a frame at
a time (``frame``, or ``frames`` for one that blocks): each frame's events are already in the chat's record and
telemetry (``ChatController.absorb``). The app and the REPL only draw frames; neither writes thread or queue code.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from ..engine import ReplyFinished
from ..engine.events import Event
from ..errors import one_line
from .controller import ChatController
from .exchange import Exchange, Failure

NAME = "specchat-engine"
T = TypeVar("T")


class Activity(Enum):
    """What the worker is doing for a front end (None: nothing)."""

    LOADING = "loading"
    GENERATING = "generating"
    COMPARING = "comparing"


@dataclass(frozen=True)
class Frame:
    """What arrived since the last frame, already in the chat's record and telemetry."""

    events: list[Event]
    finished: ReplyFinished | None  # the reply ended in this frame
    failure: Failure | None  # the backend stopped the reply with an error
    ended: bool  # the reply's job is over: nothing more comes for it


@dataclass(frozen=True)
class _Ended:
    """An exchange's job is over (after its last event), and how it failed, if it did."""

    exchange: Exchange
    failure: Failure | None


class Replies:
    """A front end's replies and every other call into its backend, one at a time on one worker thread."""

    def __init__(self, controller: ChatController, on_job_failed: Callable[[str], None]) -> None:
        """``on_job_failed``: told (on the worker) the one line of a job that raised; the worker goes on."""
        self.controller = controller
        self._answering: Exchange | None = None  # the exchange whose frames are handed up now
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._inbox: deque[Event | _Ended] = deque()  # filled by the worker, drained a frame at a time
        self._on_job_failed = on_job_failed
        self._worker = threading.Thread(target=self._work, name=NAME, daemon=True)

    # -- the worker ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._worker.start()

    @property
    def working(self) -> bool:
        """Whether the worker is still running (after ``close``: a backend that hung, whose models nothing may
        free)."""
        return self._worker.is_alive()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the worker; it reports its own result (a job that raises is ``on_job_failed``'s)."""
        self._jobs.put(job)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` run on the worker, its result (or exception) here."""
        return self.future(fn, *args, **kwargs).result()

    def future(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """``fn`` run on the worker; its result (or exception) when it is done."""
        done: Future[T] = Future()

        def job() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 — handed to the caller, who says it
                    done.set_exception(exc)

        self._jobs.put(job)
        return done

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every job submitted so far has run; False when ``timeout`` passed first."""
        if not self._worker.is_alive():
            return True
        idle = threading.Event()
        self._jobs.put(idle.set)
        return idle.wait(timeout)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception as exc:  # any failure, not only specchat's own: a front end must never wait forever
                self._on_job_failed(one_line(exc))

    # -- a reply -------------------------------------------------------------------------------------------------

    def answer(self, exchange: Exchange) -> None:
        """Answer ``exchange`` (a question the controller began) on the worker; its events come up in frames."""
        controller = self.controller
        self._answering = exchange

        def job() -> None:
            failure = None
            try:
                failure = exchange.run(self._inbox.append)  # all the worker does per event: it never waits
                controller.switcher.refresh_facts()
            finally:
                self._inbox.append(_Ended(exchange, failure))

        self.submit(job)

    def frame(self) -> Frame | None:
        """What arrived since the last frame (None: nothing), into the chat's record and telemetry."""
        arrived = self._drain()
        events = [e for e in arrived if not isinstance(e, _Ended)]
        # (the end of an earlier exchange, whose last frame a front end did not wait for, is no news)
        ended = next((e for e in arrived if isinstance(e, _Ended) and e.exchange is self._answering), None)
        if not events and ended is None:
            return None
        finished = self.controller.absorb(events) if events else None
        return Frame(events, finished, ended.failure if ended else None, ended is not None)

    def frames(self, every_s: float) -> Iterator[Frame]:
        """The reply's frames, one at most every ``every_s`` seconds, until it ends (for a front end that blocks)."""
        while True:
            frame = self.frame()
            if frame is not None:
                yield frame
                if frame.ended:
                    return
            time.sleep(every_s)

    def cancel(self) -> None:
        """Esc: the reply (or A/B) in progress stops at its next step."""
        self.controller.cancel_reply()

    def quit(self, wait_s: float) -> None:
        """The front end is closing: a reply in progress stops at its next step (a prefill mid-batch), the worker
        finishes what it was doing, and everything it produced is kept, the reply marked interrupted."""
        self.controller.quitting()
        self.wait_idle(wait_s)
        late = [e for e in self._drain() if not isinstance(e, _Ended)]
        self.controller.interrupt(late)

    def close(self, wait_s: float) -> None:
        """``quit``, then the backend closed on the worker (nothing is freed under a running decode) and the worker
        stopped."""
        self.quit(wait_s)
        self._jobs.put(self.controller.close)
        self._jobs.put(None)
        if self._worker.is_alive():
            self._worker.join(wait_s)

    def _drain(self) -> list[Event | _Ended]:
        drained = []
        while self._inbox:
            drained.append(self._inbox.popleft())
        return drained
