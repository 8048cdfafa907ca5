"""The specchat Textual app: presentation over the chat flow the REPL uses too (``chats``: the controller, the
switcher, the replies). Data flows one way: backend → events → records and telemetry → widgets. Every call into the
backend runs on ``chats.replies.Replies``' worker thread; a reply comes up a frame at a time (``FrameArrived``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen

from ..chats.ab import ABResult
from ..chats.controller import ChatController, ControllerViews
from ..chats.switcher import Switched
from ..chats.records import ReplyRecord, UserTurn
from ..chats.replies import Activity, Frame, Replies
from ..chats.session import ChatSession
from ..chats.store import Store, StoreError
from ..chats.store_opening import open_store
from ..errors import SpecchatError
from ..profiles import Profile, load_profile
from .priority import lower_ui_priority
from .chat_actions import ChatActions
from .editing import EditingActions
from .streaming import EXIT_WAIT_S, ReplyStreaming
from .switching import SwitchingActions
from .inspecting import InspectingActions
from .keymap import ALL_BINDINGS, APP_BINDINGS, INSPECTOR_BINDINGS, REPLAY_BINDINGS, load_keymap
from .terminal_input import tolerate_invalid_utf8
from .screens import ABScreen, HelpScreen
from .settings import Settings
from .widgets.footer import Footer
from .widgets.prompt import PromptInput
from .widgets.reply import Legend, ReplyView, UserMessage, legend
from .widgets.sidebar import MemorySnapshot, ProfileInfo, Sidebar

# On a CPU the UI competes with llama.cpp's threads for the same cores: every redraw costs decode speed, about one
# for one. Tokens and the sidebar are therefore refreshed together, five times a second (the sidebar must lag by
# less than 250 ms), on the UI's own clock.
FRAME_S = 0.2
STORE_FIRST_WAIT_S = 0.3  # how long the UI thread waits for another process's write lock before waiting elsewhere


class SpecchatApp(ControllerViews, ReplyStreaming, SwitchingActions, ChatActions, InspectingActions, EditingActions,
                  App):
    CSS_PATH = "specchat.tcss"
    BINDINGS = APP_BINDINGS
    TITLE = "specchat"
    # What the worker thread is doing for the UI (None: nothing), and the line the sidebar shows under the profile
    # (loading…, an edit in progress, a failed load): the sidebar follows both.
    busy: var[Activity | None] = var(None, init=False)
    status: var[str] = var("", init=False)

    class FrameArrived(Message):
        """A reply's events of one frame, in its record and telemetry already (``Replies.frame``)."""

        def __init__(self, frame: Frame) -> None:
            super().__init__()
            self.frame = frame

    class ProfileLoaded(Message):
        def __init__(self, switched: Switched) -> None:
            super().__init__()
            self.switched = switched

    class LoadPhaseBegun(Message):
        """A load began a phase (``engine/phases.py``): loading a model, deriving the demo draft, timing verify
        batches, measuring plain decoding… — what it is doing now, and how far where that is known."""

        def __init__(self, line: str) -> None:
            super().__init__()
            self.line = line

    class LoadFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class EngineFailed(Message):
        """An engine job raised; the worker thread goes on with the next one."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    class ABFinished(Message):
        def __init__(self, result: ABResult | None, error: str = "") -> None:
            super().__init__()
            self.result, self.error = result, error  # no result: cancelled, or the error says why

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.controller = ChatController(None, self.settings.profile, self._store_problem,
                                         max_tokens=self.settings.max_tokens)
        self.show_ghosts = False
        self.markdown = False
        self.views: dict[int, ReplyView | UserMessage] = {}  # id(turn) → its widget
        self.memory_snapshot: MemorySnapshot | None = None
        self._named: Profile | None = None  # the profile asked for, before anything is loaded
        self.replies = Replies(self.controller, lambda error: self.post_message(self.EngineFailed(error)))
        self.remapped: dict[str, str] = {}  # binding id → keys, from keymap.toml

    @property
    def session(self) -> ChatSession:
        return self.controller.session

    # -- layout ------------------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield VerticalScroll(id="chat")
                yield self.new_inspector()
                yield Legend(legend(), id="legend")
                yield PromptInput(max_paste=self.settings.max_paste_chars)
            yield Sidebar()
        yield Footer()

    @property
    def chat(self) -> VerticalScroll:
        return self.query_one("#chat", VerticalScroll)

    @property
    def sidebar(self) -> Sidebar:
        return self.query_one(Sidebar)

    @property
    def last_reply(self) -> ReplyView | None:
        record = self.session.last_reply
        view = self.views.get(id(record)) if record is not None else None
        return view if isinstance(view, ReplyView) else None

    def follow_chat(self) -> None:
        """Anchor the chat once it overflows: it then follows the stream in the same layout pass that grows it.

        Scrolling up releases the anchor (reading is never interrupted), scrolling back to the bottom restores it.
        Anchoring a chat that does not fill the view yet would push it to the bottom of the screen.
        """
        if not self.chat.is_anchored and self.chat.max_scroll_y > 0:
            self.chat.anchor()

    def show_turns(self) -> None:
        """Draw the whole chat again from the session (a chat opened, a new chat)."""
        if self.inspector.display:
            self.inspector.action_close()
        self.chat.remove_children()
        self.chat.anchor(False)
        self.views.clear()
        for turn in self.session.turns:
            self.mount_turn(turn)
        self.chat.scroll_end(animate=False)
        self.call_after_refresh(self.follow_chat)

    def mount_turn(self, turn: UserTurn | ReplyRecord) -> None:
        view = UserMessage(turn.text) if isinstance(turn, UserTurn) else ReplyView(turn, show_ghosts=self.show_ghosts,
                                                                                   markdown=self.markdown)
        index = next(i for i, t in enumerate(self.session.turns) if t is turn)
        versions = self.session.alternatives(index)
        if versions is not None:
            view.set_versions(versions, f"{self.binding_key('version_previous')} {self.binding_key('version_next')}")
        view.set_class(index == self.selected, "selected")
        self.views[id(turn)] = view
        self.chat.mount(view)

    def view_of(self, turn: UserTurn | ReplyRecord) -> ReplyView | UserMessage | None:
        return self.views.get(id(turn))

    def forget_views(self) -> None:
        """Remove the views of turns the session no longer has (a refused message, a regenerated reply)."""
        alive = {id(turn) for turn in self.session.turns}
        for key in [key for key in self.views if key not in alive]:
            view = self.views.pop(key)
            if view is self.inspector.view or view is self.inspector.copy_shown:
                self.inspector.action_close()  # it explained a reply that is no longer there
            view.remove()

    def on_mount(self) -> None:
        self.replies.start()
        lower_ui_priority()
        self.frame_timer = self.set_interval(FRAME_S, self._next_frame, pause=True)
        # A chat that fitted may overflow once the terminal narrows: it then shows its end, where the reader was, not
        # its top. (An anchored chat keeps its end by itself; one scrolled up is released and keeps its place.)
        self.watch(self.chat, "virtual_size", self.follow_chat, init=False)
        try:
            self.remapped = load_keymap(self.settings.keymap)
            self.set_keymap(self.remapped)
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        session = self.session
        session.store = self._open_store()
        try:
            self._named = load_profile(self.settings.profile)  # shown until its models are loaded
            session.profile = self._named.name
        except SpecchatError as exc:
            self.notify(str(exc), severity="error", timeout=15)
        self._resume()
        if self.settings.start_note:
            self.notify(self.settings.start_note, severity="warning", timeout=15)
        if self.settings.autoload:
            self.start_load(self.settings.profile)
        self.query_one(PromptInput).focus()
        self._apply_width(self.size.width)
        self.refresh_sidebar()

    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        # A narrow terminal keeps the chat usable: the sidebar collapses instead of squeezing it.
        narrow = width < self.settings.sidebar_min_width
        self.sidebar.display = not narrow
        # Closer keys, and Ctrl+P's palette (still bound) off the bar: at 70 columns F1 stays on it.
        footer = self.query_one(Footer)
        footer.compact, footer.show_command_palette = narrow, not narrow

    def watch_busy(self) -> None:
        self.refresh_sidebar()

    def watch_status(self) -> None:
        self.refresh_sidebar()

    def refresh_sidebar(self) -> None:
        facts = self.controller.facts
        named = self.profile or self._named
        name = named.name if named else self.session.profile or "(no profile)"
        method = self.controller.switcher.method if facts or not named else named.method
        tip = self.controller.advice()
        said = ""
        if tip is not None:
            key = self.binding_key("suggested_profile")
            said = f"{tip.why} — {key}: {tip.suggestion or 'speculation off'} ({tip.does})"
        profile = ProfileInfo(name, method, self.status, facts.where if facts else "", said)
        self.sidebar.show(self.telemetry, profile, self.memory_snapshot)

    def binding_key(self, binding_id: str) -> str:
        """The key bound to ``binding_id`` now (a keymap may have moved it)."""
        active = {b.binding.id: key for key, b in self.screen_stack[0].active_bindings.items() if b.binding.id}
        if binding_id in active:
            return active[binding_id]
        # A binding of the inspector or the replay, not active now: as the keymap read at start has it.
        return self.remapped.get(binding_id) or next(b.key for b in ALL_BINDINGS + INSPECTOR_BINDINGS + REPLAY_BINDINGS
                                                if b.id == binding_id)

    def sample_memory(self) -> None:
        facts = self.controller.facts
        pid = facts.pid if facts else None
        self.memory_snapshot = MemorySnapshot(*self.settings.memory(pid), dict(facts.model_bytes) if facts else {},
                                              "this process" if pid is None else f"server pid {pid}",
                                              bool(facts and facts.cpu_only))

    # -- storage -----------------------------------------------------------------------------------------------------

    def _open_store(self) -> Store | None:
        """The chat database; while another process holds its write lock, None for now: it opens on a thread of its
        own, the chat going on in memory meanwhile (``_store_opened``)."""
        if self.settings.db_path is None:
            return None
        try:
            store, problem = open_store(self.settings.db_path, _wait_elsewhere, first_wait=STORE_FIRST_WAIT_S)
        except _WaitElsewhere as busy:
            self.notify(f"{busy} — the chat is saved once it is done", timeout=20)
            threading.Thread(target=self._wait_for_store, name="chat database", daemon=True).start()
            return None
        if problem:
            self.notify(problem, severity="error", timeout=20)
        return store

    def _wait_for_store(self) -> None:
        store, problem = open_store(self.settings.db_path)
        self.call_from_thread(self._store_opened, store, problem)

    def _store_opened(self, store: Store | None, problem: str | None) -> None:
        """The database another process held opened: what was said meanwhile is saved, the last chat reopened if
        nothing was, and the stored chats drafted from."""
        self.session.store = store
        if problem:
            self.notify(problem, severity="error", timeout=20)
            return
        self.notify("the chat database is open — saving")
        if self.session.turns:
            self.session.save()
        else:
            self._resume()
        self.replies.submit(self.controller.switcher.store_opened)

    def _resume(self) -> None:
        """The last chat reopened, when the settings say so."""
        store = self.session.store
        if not self.settings.resume or store is None:
            return
        try:
            chats = store.conversations()
            if chats:
                self.controller.open_chat(chats[0].id)
                self.show_turns()
        except StoreError as exc:  # the last chat cannot be read: start a new one, say why
            self.notify(str(exc), severity="error", timeout=20)

    def _store_problem(self, line: str, error: bool) -> None:
        self.notify(line, severity="error" if error else "information", timeout=20 if error else 8)

    # -- the worker thread -------------------------------------------------------------------------------------------

    def run_job(self, activity: Activity, status: str, job: Callable[[], None]) -> None:
        """Run ``job`` on the backend's worker thread; it posts its own result, or EngineFailed if it raises."""
        self.set_job(activity, status)
        self.replies.submit(job)

    def job_done(self) -> None:
        self.set_job(None, "")

    def set_job(self, activity: Activity | None, status: str) -> None:
        """The job and its status line together: one sidebar refresh, where setting each would make two."""
        changed = (activity, status) != (self.busy, self.status)
        self.set_reactive(SpecchatApp.busy, activity)
        self.set_reactive(SpecchatApp.status, status)
        if changed:
            self.refresh_sidebar()

    def on_specchat_app_engine_failed(self, message: EngineFailed) -> None:
        self._streaming(False)
        self.notify(f"the engine stopped: {message.error}", severity="error", timeout=20)
        self.job_done()

    # -- generation ----------------------------------------------------------------------------------------------------

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

    async def action_quit(self) -> None:
        self.exit()

    # -- actions -------------------------------------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Profiles", "Switch profile or draft model (F2)", self.action_profiles)
        yield SystemCommand("Speculation on/off", "Off for the next messages, or back on (Ctrl+T)",
                            self.action_toggle_speculation)
        yield SystemCommand("Previous profile", "Back to the profile before the last switch (F4)",
                            self.action_previous_profile)
        yield SystemCommand("Draft longer", "One draft token more per step (F6)", self.action_draft_longer)
        yield SystemCommand("Draft shorter", "One draft token less per step (F5)", self.action_draft_shorter)
        yield SystemCommand("A/B compare", "Rerun the last prompt without speculation", self.action_ab_compare)
        yield SystemCommand("Toggle ghosts", "Show rejected draft tokens", self.action_toggle_ghosts)
        yield SystemCommand("Inspect tokens", "What decided each token of a reply (F8)", self.action_inspect)
        yield SystemCommand("Replay a reply", "Step through a reply's drafts and verifications (F9)",
                            self.action_replay)
        yield SystemCommand("Export chat", "Export this chat to Markdown and JSON", self.action_export)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.settings.keymap))

    def action_toggle_ghosts(self) -> None:
        self.show_ghosts = not self.show_ghosts
        facts = self.controller.facts
        if self.show_ghosts and facts is not None and not facts.rejected_tails:
            self.notify(f"{facts.where} reports how many draft tokens it rejected, never which: no ghosts to"
                        " show for its replies", severity="warning")
        for view in self.query(ReplyView):
            view.set_ghosts(self.show_ghosts)

    def action_toggle_markdown(self) -> None:
        self.markdown = not self.markdown
        for view in self.query(ReplyView):
            view.set_markdown(self.markdown)

    def action_copy_reply(self) -> None:
        record = self.session.last_reply
        if record is not None and record.text:
            self.copy_to_clipboard(record.text)
            self.notify("reply copied to the clipboard")

    def action_regenerate(self) -> None:
        if self.busy is not None or self.backend is None:
            return
        try:
            exchange = self.controller.regenerate()
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.start_exchange(exchange)

    def action_ab_compare(self) -> None:
        if self.busy is not None:
            self.notify(self.why_busy() or "", severity="warning")
            return
        try:
            comparison = self.controller.compare()
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return

        controller = self.controller

        def job() -> None:
            try:
                result = comparison.run()
            except SpecchatError as exc:  # e.g. a remote server, whose speculation cannot be switched off from here
                controller.switcher.refresh_facts()
                self.post_message(self.ABFinished(None, str(exc)))
                return
            controller.switcher.refresh_facts()  # a managed server was restarted twice: another pid, another port
            self.post_message(self.ABFinished(result))

        self.run_job(Activity.COMPARING, "A/B: rerunning without speculation… (Esc stops it)", job)

    def on_specchat_app_abfinished(self, message: ABFinished) -> None:
        if message.error:
            self.notify(message.error, severity="warning", timeout=15)
        elif message.result is None:
            self.notify("A/B cancelled")
        else:
            self.controller.compared(message.result)
            self.push_screen(ABScreen(message.result))
        self.sample_memory()
        self.job_done()

    def on_unmount(self) -> None:
        """Quitting, mid-reply or not: what the reply produced is kept, marked interrupted; the backend closes on the
        worker, after what it was doing (``Replies.close``)."""
        self.replies.close(EXIT_WAIT_S)

    @property
    def engine_running(self) -> bool:
        """Whether the worker is still busy (a backend that hung): then nothing may free its models."""
        return self.replies.working


def make_app(settings: Settings | None = None) -> SpecchatApp:
    """The app factory used by ``specchat`` and by the tests."""
    tolerate_invalid_utf8()
    return SpecchatApp(settings)


class _WaitElsewhere(Exception):
    """Opening the database waits for another process: not on the UI thread."""


def _wait_elsewhere(line: str) -> None:
    raise _WaitElsewhere(line)
