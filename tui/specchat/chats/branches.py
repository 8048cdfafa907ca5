"""The answers and edits a chat keeps without showing them: its branches.

A chat shows one path, the session's turns. Where a message was edited and sent again, or a reply asked for again,
the chat forks: the fork at position p holds every alternative tail of the chat from p on, the one shown included
(it is ``turns[p:]``, marked None here); the others are kept whole, with the forks inside them. Showing another one
swaps the tails. A front end shows "‹ 2/3 ›" on the message at p.

The store keeps each alternative not shown as one row (position, ordinal, tail): the tail's messages and the forks
inside it as compressed JSON; the shown one's ordinal is the one no row has.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .records import Turn
from .store_rows import BranchRow, StoredMessage

DAMAGED_ORDINALS = 1_000_000  # where damaged rows are written back: above any ordinal an alternative has


@dataclass
class Tail:
    """An alternative not shown: the chat's turns from the fork's position on, and the forks inside them."""

    turns: list[Turn]
    forks: dict[int, Fork] = field(default_factory=dict)  # by position in the chat, like the session's


@dataclass
class Fork:
    alternatives: list[Tail | None]  # in the order they were made; None is the one shown

    @property
    def shown(self) -> int:
        return self.alternatives.index(None)

    def __len__(self) -> int:
        return len(self.alternatives)


class Branches:
    """A chat's forks along the turns it shows, and the moves between alternatives; ``turns`` is the session's list,
    changed in place."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.forks: dict[int, Fork] = {}
        self.damaged: list[BranchRow] = []  # rows the store had that could not be read: kept, not shown

    def at(self, position: int) -> tuple[int, int] | None:
        """Which alternative is shown at ``position`` (counted from 1) and how many there are; None where nothing
        forks."""
        fork = self.forks.get(position)
        return (fork.shown + 1, len(fork)) if fork is not None else None

    def branch(self, position: int) -> int | None:
        """Keep the chat from ``position`` on as an alternative not shown; the turns end before it, and what is
        added next is the new alternative, shown. Returns the index of the alternative that was shown (for
        ``delete_from``'s ``instead``), None when there was nothing from ``position`` on to keep."""
        if position >= len(self.turns):
            return None  # an empty tail is no version (a question not answered yet)
        tail = Tail(self.turns[position:], {p: f for p, f in self.forks.items() if p > position})
        for p in tail.forks:
            del self.forks[p]
        fork = self.forks.setdefault(position, Fork([None]))
        before = fork.shown
        fork.alternatives[before] = tail
        fork.alternatives.append(None)
        del self.turns[position:]
        return before

    def show(self, position: int, index: int) -> None:
        """Show alternative ``index`` (from 0) of the fork at ``position`` in place of the one shown."""
        fork = self.forks[position]
        chosen = fork.alternatives[index]
        if chosen is None:
            return
        fork.alternatives[fork.shown] = Tail(self.turns[position:],
                                             {p: self.forks.pop(p) for p in list(self.forks) if p > position})
        fork.alternatives[index] = None
        self.turns[position:] = chosen.turns
        self.forks.update(chosen.forks)

    def delete_from(self, position: int, instead: int | None = None) -> None:
        """Delete the message at ``position`` and everything after it; where the chat forks there, alternative
        ``instead`` (an index among those left) is shown in its place, by default the nearest."""
        for p in [p for p in self.forks if p > position]:
            del self.forks[p]
        del self.turns[position:]
        fork = self.forks.get(position)
        if fork is None:
            return
        shown = fork.shown
        del fork.alternatives[shown]
        index = instead if instead is not None and 0 <= instead < len(fork) else max(shown - 1, 0)
        chosen = fork.alternatives[index]
        assert chosen is not None
        fork.alternatives[index] = None
        self.turns[position:] = chosen.turns
        self.forks.update(chosen.forks)
        if len(fork) == 1:
            del self.forks[position]

    def reveal(self, after: int, holds: Callable[[str], bool]) -> tuple[int | None, bool]:
        """Show the alternatives, nested ones too, that bring a turn at or after ``after`` whose text ``holds`` onto
        the chat shown (a search hit inside a version kept in another version); returns that turn's position (None
        when no turn holds it) and whether another alternative is shown now."""
        path = _search(self.turns, 0, self.forks, after, holds)
        if path is None:
            return None, False
        for position, index in path[:-1]:
            self.show(position, index)
        return path[-1][0], len(path) > 1

    # -- as the store keeps them -------------------------------------------------------------------------------------

    def rows(self, stored) -> list[BranchRow]:
        """Every alternative not shown, as store rows (``stored`` makes a turn a StoredMessage), and the damaged rows
        ``load`` met, as they were (under ordinals no alternative takes)."""
        rows = [BranchRow(position, ordinal, zlib.compress(json.dumps(_tail_json(tail, stored)).encode()),
                          "\n\n".join(_texts(tail)))
                for position, fork in sorted(self.forks.items())
                for ordinal, tail in enumerate(fork.alternatives) if tail is not None]
        return rows + [BranchRow(row.position, DAMAGED_ORDINALS + i, row.tail) for i, row in enumerate(self.damaged)]

    def load(self, rows: list[BranchRow], turn_of) -> None:
        """The forks the store kept (``turn_of`` makes a StoredMessage a turn). A row that cannot be read (damaged,
        or for a position the chat no longer has) is kept aside in ``damaged``, written back as it was, and the
        chat shows without it; every other version is there."""
        valid: dict[int, dict[int, Tail]] = {}
        taken: dict[int, set[int]] = {}
        self.damaged = []
        for row in rows:
            taken.setdefault(row.position, set()).add(row.ordinal)
            try:
                tail = _tail_of(json.loads(zlib.decompress(row.tail)), turn_of)
            except (ValueError, TypeError, KeyError, zlib.error):
                tail = None
            if tail is None or not 0 <= row.position <= len(self.turns) or not tail.turns:
                self.damaged.append(row)
                continue
            valid.setdefault(row.position, {})[row.ordinal] = tail
        self.forks = {}
        for position, tails in valid.items():
            used = taken[position]
            shown = next(i for i in range(len(used) + 1) if i not in used)  # the ordinal no row has
            ordered = sorted(tails)
            before = sum(1 for ordinal in ordered if ordinal < shown)
            alternatives: list[Tail | None] = [tails[k] for k in ordered]
            self.forks[position] = Fork(alternatives[:before] + [None] + alternatives[before:])


def _search(turns: list[Turn], first: int, forks: dict[int, Fork], after: int,
            holds: Callable[[str], bool]) -> list[tuple[int, int]] | None:
    """The (position, alternative) moves, outermost first, that show a turn at or after ``after`` holding the text,
    ending with that turn's (position, -1); None when no turn holds it. ``turns`` are the chat's from position
    ``first`` on, ``forks`` those inside them (keyed by position in the chat)."""
    for position in range(max(after, first), first + len(turns)):
        if holds(turns[position - first].text):
            return [(position, -1)]
    for position in sorted(p for p in forks if p >= after):
        for index, tail in enumerate(forks[position].alternatives):
            if tail is not None:
                inner = _search(tail.turns, position, tail.forks, position, holds)
                if inner is not None:
                    return [(position, index), *inner]
    return None


def _texts(tail: Tail) -> list[str]:
    """The text of every message in ``tail`` and in the branches inside it."""
    texts = [turn.text for turn in tail.turns]
    for fork in tail.forks.values():
        for alternative in fork.alternatives:
            if alternative is not None:
                texts += _texts(alternative)
    return texts


def _tail_json(tail: Tail, stored) -> dict:
    return {"turns": [asdict(stored(t)) for t in tail.turns],
            "forks": [{"position": p, "alternatives": [None if a is None else _tail_json(a, stored)
                                                        for a in fork.alternatives]}
                      for p, fork in sorted(tail.forks.items())]}


def _tail_of(data: dict, turn_of) -> Tail:
    turns = []
    for m in data["turns"]:
        message = StoredMessage(**m)
        message.segments = [tuple(s) for s in message.segments] if message.segments else None
        message.ghosts = [tuple(g) for g in message.ghosts]
        turns.append(turn_of(message))
    forks = {}
    for fork in data["forks"]:
        alternatives = [None if a is None else _tail_of(a, turn_of) for a in fork["alternatives"]]
        if alternatives.count(None) != 1:
            raise ValueError("a fork shows exactly one alternative")
        forks[int(fork["position"])] = Fork(alternatives)
    return Tail(turns, forks)
