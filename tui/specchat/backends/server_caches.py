"""The stored chats as llama.cpp's lookup caches, for a llama-server specchat starts that drafts with ngram-cache:
built on a thread of their own (``lookup_cache.LookupCacheBuilder``), given to the server at its next start, and
written again without a chat that was deleted or made private."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import paths
from ..engine.chat_template import ChatTemplate
from ..engine.conversation import Forgotten
from ..engine.drafters.stored_chats import StoredChats
from ..errors import SpecchatError
from .lookup_cache import LookupCacheBuilder, cache_args
from .run_config import RunConfig
from .run_folder import run_folder
from .server_flags import reads_lookup_caches
from .server_process import ServerProcess


class ServerCaches:
    """The lookup caches of one managed server: the build under way or done, and the flags the server runs with."""

    def __init__(self) -> None:
        self.read: StoredChats | None = None  # the stored replies; None: the server drafts without them
        self.builder: LookupCacheBuilder | None = None
        self.running_args: list[str] = []  # the cache flags the server process runs with
        self._folder: Path | None = None  # the owner's alone, in this process's run folder
        self._forgotten: set[int] = set()
        self._forget_pending = False  # set by forget from any thread, acted on before the next reply
        self._problem = ""  # why the server runs without the caches it was given

    def notes(self) -> list[str]:
        return [note for note in (self.builder.problem if self.builder is not None else "", self._problem) if note]

    def write(self, config: RunConfig | None, target_id: str, template: ChatTemplate | None) -> None:
        """A new build for ``config``'s server (None, or a server that does not read them: none); the one it replaces
        writes nothing more, and its files go once the server no longer reads them."""
        if self.builder is not None:
            self.builder.cancel()
        self.builder = None
        if self.read is None or config is None or template is None or not reads_lookup_caches(config):
            return
        if self._folder is None:
            # The owner's alone, in this process's run folder: a later start removes it if this process is killed.
            self._folder = Path(tempfile.mkdtemp(prefix="lookup-", dir=run_folder()))
        self.builder = LookupCacheBuilder(self.read, config.target.path, target_id, template,
                                          paths.cache_dir() / "history" / f"{target_id}.npz",
                                          Path(tempfile.mkdtemp(dir=self._folder)), frozenset(self._forgotten))

    def stale_for(self, config: RunConfig) -> bool:
        """Whether ``config``'s server reads caches none of which were built for its target (its own token ids)."""
        return reads_lookup_caches(config) and (self.builder is None or self.builder.model_path != config.target.path)

    def wait_written(self) -> bool:
        """Wait for the build under way; False when there is none."""
        if self.builder is None:
            return False
        self.builder.done.wait()
        return True

    def forget(self, what: Forgotten, restart: bool) -> None:
        """A chat deleted or made private (or messages of one deleted): written again without it, and the server
        started again before the next reply where ``restart`` (it keeps what every request told it)."""
        if what.messages is None:
            self._forgotten.add(what.chat)
        if restart:
            self.start_afresh()

    def start_afresh(self) -> None:
        """Before the next reply the server starts again (forgetting what it learned), its caches written anew."""
        self._forget_pending = True

    def ready_args(self, config: RunConfig) -> list[str]:
        """The flags of the caches ``config``'s server drafts from now: none until they are written, nor while a chat
        they hold was forgotten and they are written again."""
        builder = self.builder
        if builder is None or self._forget_pending or not builder.done.is_set() or not reads_lookup_caches(config) \
                or builder.model_path != config.target.path:
            return []
        return cache_args(builder.files)

    def follow(self, process: ServerProcess, base_args: list[str], config: RunConfig,
               rewrite: Callable[[], None]) -> None:
        """Before a reply: ``process`` restarted with the caches just written, or, after a chat was forgotten, without
        what it learned and with the caches ``rewrite`` starts anew (costing that reply one server start)."""
        forgetting = self._forget_pending
        if forgetting:
            self._forget_pending = False
            rewrite()  # anew, without the forgotten chats; until then without caches
        wanted = self.ready_args(config)
        if wanted == self.running_args and not forgetting:
            return
        process.stop()
        process.args = base_args + wanted
        try:
            process.start()
        except SpecchatError as exc:
            if not wanted:
                raise
            # Files it cannot read stop llama.cpp at start: the chat goes on without them, and says so.
            self._problem = f"earlier chats are not drafted from: the server would not start with them ({exc})"
            assert self.builder is not None  # the caches it was started with are this build's
            self.builder.cancel()
            self.builder = None
            wanted = []
            process.args = base_args
            process.start()
        self.running_args = wanted
        self._drop_unread()

    def _drop_unread(self) -> None:
        """Every build's folder but the current one's, once the server reads none of them (they hold chats' n-grams)."""
        if self._folder is None:
            return
        keep = self.builder.folder if self.builder is not None else None
        for folder in self._folder.iterdir():
            if folder != keep:
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        if self.builder is not None:
            self.builder.cancel()  # a build still running writes nothing into the folder going now
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
