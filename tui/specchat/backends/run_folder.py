"""What a specchat process keeps only while it runs — its llama-servers' logs and pids, the lookup caches of the stored
chats it gives them — in a folder of its own under the user cache, readable by its owner alone (they hold n-grams of
the user's chats). The folder goes at exit; a process killed before its exit (kill -9, a crash, a power cut) leaves
it behind, and the next process that needs one removes it, stopping any llama-server it names that still runs (where
the system did not stop it with its parent: ``server_process``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
from pathlib import Path

from .. import paths

MODE = 0o700
SERVER_PID = ".pid"  # a file per server started, named by its port, holding its pid


def runs_dir() -> Path:
    return paths.cache_dir() / "run"


def run_folder() -> Path:
    """This process's folder (made on first use, with what killed processes left removed first)."""
    folder = runs_dir() / str(os.getpid())
    if not folder.is_dir():
        remove_left_behind()
        runs_dir().mkdir(parents=True, mode=MODE, exist_ok=True)
        os.chmod(runs_dir(), MODE)
        folder.mkdir(mode=MODE, exist_ok=True)
        atexit.register(shutil.rmtree, folder, True)
    return folder


def remove_left_behind() -> list[Path]:
    """The folders of processes no longer running, removed, and the servers they name stopped; returns the folders."""
    if not runs_dir().is_dir():
        return []
    removed = []
    for folder in runs_dir().iterdir():
        if not folder.name.isdigit() or _running(int(folder.name)):
            continue
        for pid_file in folder.glob(f"*{SERVER_PID}"):
            _stop_left_server(pid_file)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process holds that pid now
    return True


def _stop_left_server(pid_file: Path) -> None:
    """A llama-server a killed process started, if it still runs (and that pid is still a llama-server: /proc says)."""
    try:
        pid = int(pid_file.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except (OSError, ValueError):
        return  # gone, or no /proc to tell what the pid is now: nothing is killed on a guess
    if Path(os.fsdecode(command)).name.startswith("llama-server"):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def private_file(path: Path) -> None:
    """``path`` readable by its owner alone."""
    os.chmod(path, 0o600)
