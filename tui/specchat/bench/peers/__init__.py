"""The peers `specchat bench` runs beside specchat's own pair. Each module of this package that defines ``PEER`` (a
``Peer``) is one — ``llama_cpp_python``, ``lookup``, ``llama_server`` — found here (``discovery``), so a new peer is
one new module and nothing else is edited (docs/extending.md: "Adding a bench peer"), as a backend or a drafter is.

A peer opens ``BenchRunner``s: each answers a task and says how (``RunResult``); ``specchat bench`` alternates them
with its own and reports them side by side. A peer module must not import llama.cpp when it loads: ``--peers``' help
reads this registry at every start of the CLI.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ...backends.run_config import RunConfig
from ...discovery import declared_in
from ...errors import ConfigError
from ..runners import PeerError, RunResult
from ..tasks import Task


class BenchRunner(Protocol):
    """One configuration that answers tasks: what ``specchat bench`` alternates and reports."""

    def name(self) -> str:
        """The label of its rows; the same for its whole life."""
        ...

    def run(self, task: Task, rep: int) -> RunResult:
        """Every turn of ``task`` (``runners.combine_turns``); ``PeerError`` when it cannot."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class PeerContext:
    """What a peer opens its runners with."""

    config: RunConfig  # the profile's, threads fixed as specchat's own runs have them
    warm: bool  # --warm: runs remember earlier runs
    stored_chats: bool  # --stored-chats: draft from the stored chats as far as the peer can
    args: argparse.Namespace  # the command line, the peer's own options among it (``Peer.add_arguments``)
    learn: Callable[[BenchRunner], None]  # give a runner the stored chats (--stored-chats)
    note: Callable[[str], None]  # a line of the report, not said on stderr (a runner skipped by design)


Opened = BenchRunner | PeerError  # a runner, or one line saying why one did not start


@dataclass(frozen=True)
class Peer:
    name: str  # what --peers names ("llama-server=PATH" gives ``open`` the value)
    help: str  # its words in --peers' help
    open: Callable[[PeerContext, str | None], Iterator[Opened]]
    order: int = 50  # its place in --peers all, the help and the report
    rival: bool = False  # the per-category verdicts rank its identical-output rows against specchat's
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None  # options of its own
    check: Callable[[argparse.Namespace, bool], None] | None = None  # (args, chosen): ConfigError before anything loads


@functools.cache
def peers() -> dict[str, Peer]:
    """Every peer, in the order --peers all runs them."""
    found = declared_in(__name__, "PEER", Peer, lambda peer: peer.name, "bench peer")
    return {peer.name: peer for peer in sorted(found, key=lambda peer: (peer.order, peer.name))}


def parse_peers(text: str) -> list[tuple[Peer, str | None]]:
    """The peers ``--peers`` names ("all": every one); one named twice runs once, with the value it was given."""
    known = peers()
    chosen: list[tuple[str, str | None]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name == "all":
            chosen += [(peer, None) for peer in known]
        elif name in known:
            chosen.append((name, value or None))
        else:
            raise ConfigError(f"unknown peer {name!r} — choose from {', '.join(known)} or all")
    merged: dict[str, str | None] = {}
    for name, value in chosen:
        merged[name] = value or merged.get(name)
    return [(known[name], value) for name, value in merged.items()]
