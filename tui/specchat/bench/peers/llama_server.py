"""Peer "llama-server": llama.cpp's own server on the profile's models, one runner per ``--spec-type`` (plain decoding
first) — the same backend code as a profile with ``[backend] kind = "llama-server"``. ``--server-types`` chooses the
types; with ``--stored-chats`` each is given the stored chats as far as it can take them (ngram-cache's lookup caches,
added to the run) and keeps what it learns across requests."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

from ...backends import open_backend
from ...backends.run_config import SPEC_TYPES, BackendSettings, RunConfig, known_spec_type
from ...backends.server_flags import uses_draft_model
from ...engine.drafters import METHODS
from ...errors import ConfigError, SpecchatError
from ..runners import BackendRunner, PeerError
from . import Opened, Peer, PeerContext

LLAMA_SERVER_TYPES = ("none", "ngram-simple", "ngram-map-k", "ngram-mod", "draft-simple", "ngram-mod,draft-simple")


def llama_server_runner(spec_type: str, config: RunConfig, binary: str | None, *, warm: bool) -> BackendRunner:
    """llama.cpp's own server with one --spec-type on the profile's models."""
    # the method whose spec type it is; llama.cpp's other n-gram types stand for "ngram"
    method = next((m.name for m in METHODS.values() if m.spec_type == spec_type), "ngram")
    n_max = config.spec.n_max if isinstance(config.spec.n_max, int) else 4
    peer = dataclasses.replace(config, spec=dataclasses.replace(config.spec, method=method, n_max=n_max),
                               backend=BackendSettings(kind="llama-server", spec_type=spec_type, binary=binary))
    label = f"llama-server {spec_type}"
    try:
        return BackendRunner(label, open_backend(peer), peer, warm=warm)
    except SpecchatError as exc:
        raise PeerError(f"{label}: {exc}") from None


def server_types(text: str, *, stored_chats: bool) -> tuple[str, ...]:
    """The types ``--server-types`` names (default: every one above, ngram-cache too with the stored chats)."""
    if not text:
        return LLAMA_SERVER_TYPES + (("ngram-cache",) if stored_chats else ())
    chosen = tuple(text.split())
    for spec_type in chosen:
        if not known_spec_type(spec_type):
            raise ConfigError(f"--server-types: unknown spec type {spec_type!r} — llama.cpp's are {', '.join(SPEC_TYPES)}"
                              ", or a comma-separated list of them")
    return chosen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server-types", default="",
        help="llama-server's spec types to run, separated by spaces (each may be a comma-separated list, as "
        "'ngram-mod,draft-simple'; default: every one above that the profile allows, with --stored-chats ngram-cache "
        "too)",
    )


def check(args: argparse.Namespace, chosen: bool) -> None:
    server_types(args.server_types, stored_chats=args.stored_chats)
    if args.server_types and not chosen:
        raise ConfigError("--server-types chooses llama-server's types — add --peers llama-server")


def opened(context: PeerContext, binary: str | None) -> Iterator[Opened]:
    """A runner per type; a type needing a draft model the profile lacks is a note; a plain server that does not start
    is the one line (the binary itself is broken) and nothing more is tried."""
    for spec_type in server_types(context.args.server_types, stored_chats=context.stored_chats):
        if uses_draft_model(spec_type) and context.config.draft is None:
            context.note(f"llama-server {spec_type} skipped: the profile has no draft model")
            continue
        try:
            runner = llama_server_runner(spec_type, context.config, binary, warm=context.warm or context.stored_chats)
        except PeerError as exc:
            yield exc
            if spec_type == LLAMA_SERVER_TYPES[0]:
                return
            continue
        yield runner  # the caller holds it (and closes it) before anything more can fail
        if context.stored_chats:
            context.learn(runner)


PEER = Peer("llama-server", f"llama-server[=PATH] (runs --spec-type {', '.join(LLAMA_SERVER_TYPES)})", opened,
            order=30, rival=True, add_arguments=add_arguments, check=check)
