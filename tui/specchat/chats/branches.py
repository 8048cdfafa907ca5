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
from dataclasses import asdict, dataclass, field

from .records import Turn
from .store import BranchRow, StoredMessage


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

    def at(self, position: int) -> tuple[int, int] | None:
        """Which alternative is shown at ``position`` (counted from 1) and how many there are; None where nothing
        forks."""
        fork = self.forks.get(position)
        return (fork.shown + 1, len(fork)) if fork is not None else None

    def branch(self, position: int) -> None:
        """Keep the chat from ``position`` on as an alternative not shown; the turns end before it, and what is
        added next is the new alternative, shown."""
        tail = Tail(self.turns[position:], {p: f for p, f in self.forks.items() if p > position})
        for p in tail.forks:
            del self.forks[p]
        fork = self.forks.setdefault(position, Fork([None]))
        fork.alternatives[fork.shown] = tail
        fork.alternatives.append(None)
        del self.turns[position:]

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

    def delete_from(self, position: int) -> None:
        """Delete the message at ``position`` and everything after it; where the chat forks there, the nearest
        other alternative is shown instead."""
        for p in [p for p in self.forks if p > position]:
            del self.forks[p]
        del self.turns[position:]
        fork = self.forks.get(position)
        if fork is None:
            return
        shown = fork.shown
        del fork.alternatives[shown]
        nearest = fork.alternatives[max(shown - 1, 0)]
        assert nearest is not None
        fork.alternatives[max(shown - 1, 0)] = None
        self.turns[position:] = nearest.turns
        self.forks.update(nearest.forks)
        if len(fork) == 1:
            del self.forks[position]

    def clear(self) -> None:
        self.forks = {}

    # -- as the store keeps them -------------------------------------------------------------------------------------

    def rows(self, stored) -> list[BranchRow]:
        """Every alternative not shown, as store rows; ``stored`` makes a turn a StoredMessage."""
        return [BranchRow(position, ordinal, zlib.compress(json.dumps(_tail_json(tail, stored)).encode()),
                          "\n\n".join(_texts(tail)))
                for position, fork in sorted(self.forks.items())
                for ordinal, tail in enumerate(fork.alternatives) if tail is not None]

    def load(self, rows: list[BranchRow], turn_of) -> None:
        """The forks the store kept (``turn_of`` makes a StoredMessage a turn). A damaged row is left out: its
        branch is lost, the chat shown and every other branch are not."""
        by_position: dict[int, dict[int, Tail]] = {}
        for row in rows:
            position, ordinal = row.position, row.ordinal
            try:
                tail = _tail_of(json.loads(zlib.decompress(row.tail)), turn_of)
            except (ValueError, TypeError, KeyError, zlib.error):
                continue
            if 0 <= position <= len(self.turns):
                by_position.setdefault(position, {})[ordinal] = tail
        self.forks = {}
        for position, tails in by_position.items():
            count = len(tails) + 1
            shown = next((i for i in range(count) if i not in tails), count - 1)
            ordered = [tails[k] for k in sorted(tails)]
            self.forks[position] = Fork(ordered[:shown] + [None] + ordered[shown:])


def _texts(tail: Tail) -> list[str]:
    """The text of every message in ``tail`` and in the branches inside it."""
    texts = [turn.text for turn in tail.turns]
    for fork in tail.forks.values():
        for alternative in fork.alternatives:
            if alternative is not None:
                texts += _texts(alternative)
    return texts


def _message_json(message: StoredMessage) -> dict:
    return asdict(message)


def _tail_json(tail: Tail, stored) -> dict:
    return {"turns": [_message_json(stored(t)) for t in tail.turns],
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
