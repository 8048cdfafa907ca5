"""A llama-server process started for a profile: a free loopback port, its log, readiness on ``/health``, a clean stop.

Every server started here is stopped when specchat exits (``atexit``), and dies with it when it is killed instead
(kill -9, a crash): on Linux the kernel sends it SIGKILL when the thread that started it ends (``PR_SET_PDEATHSIG``;
the front ends start servers from the thread that runs the backend for its whole life), elsewhere a watchdog process
reading a pipe from specchat kills it when the pipe closes. Its pid is kept in the process's run folder
(``run_folder``), from which a later start stops whatever survived all that. A server that dies on its own is noticed
by the next request.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..engine.cpu_probe import extra_buffers_work
from ..errors import BackendError
from .run_folder import SERVER_PID, run_folder

PR_SET_PDEATHSIG = 1
# Whether the kernel can end a child with its parent (Linux); elsewhere a watchdog process does (``_watchdog``).
PARENT_DEATH_SIGNAL = sys.platform.startswith("linux")

_RUNNING: set[ServerProcess] = set()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    def __init__(self, binary: Path, args: list[str], *, port: int | None = None, ready_timeout: float = 120.0) -> None:
        self.binary, self.args, self.ready_timeout = binary, args, ready_timeout
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False,
                                               dir=run_folder())
        self.proc: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        try:
            self.start()
        except BaseException:
            self.close()  # its log too
            raise

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        command = [str(self.binary), *self.args, "--host", "127.0.0.1", "--port", str(self.port)]
        if not extra_buffers_work():  # the kernels the in-process engine uses too (engine/cpu_probe.py)
            command.append("--no-repack")
        try:
            self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_dies_with_parent(os.getpid()) if PARENT_DEATH_SIGNAL else None)
        except OSError as exc:
            raise BackendError(f"cannot start {self.binary}: {exc.strerror} — check [backend] binary") from None
        _RUNNING.add(self)
        self._pid_file.write_text(str(self.proc.pid))
        if not PARENT_DEATH_SIGNAL:
            self._watchdog = _watchdog(self.proc.pid)
        self._wait_ready()

    @property
    def _pid_file(self) -> Path:
        return run_folder() / f"{self.port}{SERVER_PID}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            code = self.proc.poll()
            if code is not None:
                self.stop()
                log = self.last_log_lines()
                if any("couldn't bind" in line or "address already in use" in line.lower() for line in log):
                    raise BackendError(f"llama-server could not listen on port {self.port}: it is taken — free it or"
                                       " choose another port")
                raise BackendError(f"llama-server exited at start (code {code}): {' / '.join(log) or 'no output'}")
            if self._answers_health():
                return
            time.sleep(0.2)  # still loading the model (503), or not listening yet
        self.stop()
        raise BackendError(f"llama-server did not become ready within {self.ready_timeout:.0f} s (last log line:"
                           f" {self.last_log_lines(1)[0] if self.last_log_lines(1) else 'none'}) — raise"
                           " [backend] ready_timeout for a large model")

    def _answers_health(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def ensure_running(self) -> None:
        """Before a request: a server that died (killed, crashed) or stopped answering is started again. A killed
        server can still be in the process table while its socket already refuses, so ``/health`` decides."""
        if self.alive and self._answers_health():
            return
        if self.alive and self.proc is not None:
            # It does not answer /health: nor will it act on SIGTERM (a stopped process keeps it pending), so it is
            # killed at once instead of after stop()'s ten-second wait.
            self.proc.kill()
        self.stop()
        self.start()

    def last_log_lines(self, n: int = 3) -> list[str]:
        self.log.flush()
        lines = [line.strip() for line in Path(self.log.name).read_text(errors="replace").splitlines() if line.strip()]
        return lines[-n:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._watchdog is not None:
            self._watchdog.kill()  # its server is gone (and its pid free for another process to take)
            self._watchdog.wait()
            self._watchdog = None
        self._pid_file.unlink(missing_ok=True)
        _RUNNING.discard(self)

    def close(self) -> None:
        self.stop()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


def _dies_with_parent(parent: int) -> Callable[[], None]:
    """What the child runs before llama-server replaces it: SIGKILL when its parent thread ends, and an exit at once
    if the parent is already gone. Resolved here, in the parent: the child only calls into libc."""
    prctl = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return in_child


def _watchdog(server: int) -> subprocess.Popen:
    """A small process that kills ``server`` once the pipe from this process closes: at its exit, or its death."""
    code = (f"import os, signal, sys\nsys.stdin.read()\n"
            f"try: os.kill({server}, signal.SIGKILL)\nexcept OSError: pass")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


@atexit.register
def stop_all() -> None:
    """Stop every server started here (at exit, and before leaving without exit handlers)."""
    for server in list(_RUNNING):
        server.stop()
