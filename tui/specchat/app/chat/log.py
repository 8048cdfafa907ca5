"""The chat log: a widget per turn of the chat on screen, the selected message (alt+up / alt+down), its versions
("‹ 2/3 ›"), deleting from it, copying a reply's code block, and how replies are drawn (ghosts, Markdown).

The chat controller does the work (the REPL's /branch and /delete call the same methods); the log says what
is selected and redraws. Nothing here runs while a reply streams (``Jobs.why_busy``).
"""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.message import Message

from ...chats.controller import ChatController
from ...chats.records import ReplyRecord, UserTurn
from ...chats.session import ChatSession
from ...errors import SpecchatError
from ..jobs import Jobs
from ..keymap import BoundKeys
from ..screens.modals import CodeBlockScreen, ConfirmScreen
from .inspector import Inspector
from .reply import ReplyView, UserMessage, code_blocks

View = ReplyView | UserMessage


class ChatLog(VerticalScroll):
    class Changed(Message):
        """Messages of the chat on screen were deleted: what the sidebar counts of it changed."""

    def __init__(self, controller: ChatController, jobs: Jobs, keys: BoundKeys, inspector: Inspector) -> None:
        super().__init__(id="chat")
        self.controller, self.jobs, self.keys = controller, jobs, keys
        self.inspector = inspector  # it explains one of the log's replies: closed when that reply goes
        self.views: dict[int, View] = {}  # id(turn) → its widget
        self.selected: int | None = None  # the selected turn
        self.show_ghosts = False
        self.markdown = False

    @property
    def session(self) -> ChatSession:
        return self.controller.session

    def on_mount(self) -> None:
        # A chat that fitted may overflow once the terminal narrows: it then shows its end, where the reader was, not
        # its top. (An anchored chat keeps its end by itself; one scrolled up is released and keeps its place.)
        self.watch(self, "virtual_size", self.follow, init=False)

    # -- the turns' views ----------------------------------------------------------------------------------------------

    @property
    def last_reply(self) -> ReplyView | None:
        record = self.session.last_reply
        view = self.views.get(id(record)) if record is not None else None
        return view if isinstance(view, ReplyView) else None

    def follow(self) -> None:
        """Anchor the chat once it overflows: it then follows the stream in the same layout pass that grows it.

        Scrolling up releases the anchor (reading is never interrupted), scrolling back to the bottom restores it.
        Anchoring a chat that does not fill the view yet would push it to the bottom of the screen.
        """
        if not self.is_anchored and self.max_scroll_y > 0:
            self.anchor()

    def show_turns(self) -> None:
        """Draw the whole chat again from the session (a chat opened, a new chat)."""
        if self.inspector.display:
            self.inspector.action_close()
        self.remove_children()
        self.anchor(False)
        self.views.clear()
        for turn in self.session.turns:
            self.mount_turn(turn)
        self.scroll_end(animate=False)
        self.call_after_refresh(self.follow)

    def mount_turn(self, turn: UserTurn | ReplyRecord) -> None:
        view = UserMessage(turn.text) if isinstance(turn, UserTurn) else ReplyView(turn, show_ghosts=self.show_ghosts,
                                                                                   markdown=self.markdown)
        index = next(i for i, t in enumerate(self.session.turns) if t is turn)
        versions = self.session.alternatives(index)
        if versions is not None:
            view.set_versions(versions, f"{self.keys.of('version_previous')} {self.keys.of('version_next')}")
        view.set_class(index == self.selected, "selected")
        self.views[id(turn)] = view
        self.mount(view)

    def show_new_turns(self) -> None:
        """An exchange began: the turns it replaced go, the user's turn and its reply come."""
        self.forget_views()
        for turn in self.session.turns[-2:]:
            if id(turn) not in self.views:
                self.mount_turn(turn)
        self.scroll_end(animate=False)

    def forget_views(self) -> None:
        """Remove the views of turns the session no longer has (a refused message, a regenerated reply)."""
        alive = {id(turn) for turn in self.session.turns}
        for key in [key for key in self.views if key not in alive]:
            view = self.views.pop(key)
            if view is self.inspector.view or view is self.inspector.copy_shown:
                self.inspector.action_close()  # it explained a reply that is no longer there
            view.remove()

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

    # -- the selection -------------------------------------------------------------------------------------------------

    def action_select_message(self, step: int) -> None:
        turns = self.session.turns
        if not turns:
            self.notify("no messages yet — ask something first", severity="warning")
            return
        if self.selected is None:
            self.selected = len(turns) - 1 if step < 0 else None
        else:
            self.selected += step
            self.selected = None if self.selected >= len(turns) else max(self.selected, 0)
        self.show_selection()

    def still_selected(self) -> int | None:
        """The selected turn, while the chat still has it (turns go with a deletion, a version shown, a refusal)."""
        if self.selected is not None and self.selected >= len(self.session.turns):
            self.selected = None
        return self.selected

    def select(self, index: int | None) -> None:
        self.selected = index
        self.show_selection()

    def show_selection(self) -> None:
        self.still_selected()
        for i, turn in enumerate(self.session.turns):
            view = self.views.get(id(turn))
            if view is not None:
                view.set_class(i == self.selected, "selected")
                # Marked in words as well as in colour: a title on the border the selection adds.
                view.border_title = f"▶ selected · {self.keys.of('edit_message')} edit" \
                    f" · {self.keys.of('fork_chat')} fork · {self.keys.of('delete_message')} delete" \
                    if i == self.selected else None
                if i == self.selected:
                    view.scroll_visible(animate=False)

    def chosen(self, user_only: bool = False) -> int | None:
        """The selected turn, else the last one (the last of the user's with ``user_only``)."""
        turns = self.session.turns
        selected = self.still_selected()
        if selected is not None and (not user_only or isinstance(turns[selected], UserTurn)):
            return selected
        candidates = [i for i, t in enumerate(turns) if not user_only or isinstance(t, UserTurn)]
        return candidates[-1] if candidates else None

    # -- versions, delete, copy ----------------------------------------------------------------------------------------

    def action_version(self, step: int) -> None:
        if not self.jobs.idle_or_say(self.notify):
            return
        session = self.session
        index = self.still_selected()
        if index is None:  # the last message that has versions
            index = next((i for i in range(len(session.turns) - 1, -1, -1) if session.alternatives(i)), None)
        if index is None:
            self.notify("no message has another version — edit one (alt+e) or regenerate a reply (ctrl+r)",
                        severity="warning")
            return
        try:
            shown, count = session.step_alternative(index, step)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.selected = index
        self.show_turns()
        self.notify(f"message {index + 1}: version {shown} of {count}")

    def action_delete_message(self) -> None:
        if not self.jobs.idle_or_say(self.notify):
            return
        index = self.chosen()
        if index is None:
            self.notify("no message to delete", severity="warning")
            return
        after = len(self.session.turns) - index - 1
        question = f"Delete message {index + 1}" + (f" and the {after} after it?" if after else "?")
        self.app.push_screen(ConfirmScreen(question), lambda yes: self._delete(index) if yes else None)

    def _delete(self, index: int) -> None:
        if not self.jobs.idle_or_say(self.notify):
            return
        try:
            self.controller.delete_from(index)
        except SpecchatError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.selected = None
        self.show_turns()
        self.post_message(self.Changed())
        self.notify(f"deleted from message {index + 1} on")

    def action_copy_code(self) -> None:
        turns = self.session.turns
        chosen = self.chosen()
        index = chosen if chosen is not None and isinstance(turns[chosen], ReplyRecord) \
            else next((i for i in range(len(turns) - 1, -1, -1) if isinstance(turns[i], ReplyRecord)), None)
        blocks = code_blocks(turns[index].text) if index is not None else []
        if not blocks:
            self.notify("this reply has no code block" if index is not None else "no reply yet", severity="warning")
        elif len(blocks) == 1:
            self._copy_block(blocks[0])
        else:
            self.app.push_screen(CodeBlockScreen(blocks), lambda chosen: self._copy_block(chosen) if chosen else None)

    def _copy_block(self, block: str) -> None:
        self.app.copy_to_clipboard(block)
        lines = block.count("\n") + (not block.endswith("\n"))
        self.notify(f"code block copied to the clipboard ({lines} line{'s' * (lines != 1)})")
