"""HTTP to a model server with the standard library: JSON requests, server-sent event streams, and every failure —
refused, unreachable, TLS, an HTTP error, a broken or malformed stream — as one line that says what to do."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator

from ..errors import BackendError

TIMEOUT_S = 600.0  # a reply on a slow machine can take minutes; a dead server is noticed by the connection itself
CONNECT_TIMEOUT_S = 10.0  # a host that drops the connection attempt is said so in seconds, not minutes


def _request(url: str, body: dict | None, headers: dict[str, str]) -> urllib.request.Request:
    data = None if body is None else json.dumps(body).encode()
    return urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})


def _failure(url: str, exc: BaseException, key_env: str | None) -> BackendError:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            detail = json.loads(exc.read() or b"{}").get("error", {})
            message = detail.get("message", "") if isinstance(detail, dict) else str(detail)
        except (ValueError, OSError):
            message = ""
        if exc.code in (401, 403):
            where = f"${key_env}" if key_env else "[backend] api_key_env"
            return BackendError(f"{url} refused the request (HTTP {exc.code}{': ' + message if message else ''}) —"
                                f" check the API key in {where}")
        if exc.code == 404:
            return BackendError(f"{url} does not exist on that server (HTTP 404) — check [backend] url, and api"
                                " (\"llama.cpp\" for llama-server, \"openai\" for an OpenAI-compatible server)")
        return BackendError(f"{url} answered HTTP {exc.code}{': ' + message if message else ''}")
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLError):
        return BackendError(f"TLS error talking to {url} ({reason.reason or reason}) — check http vs https and the"
                            " server's certificate")
    if isinstance(reason, ConnectionRefusedError):
        return BackendError(f"cannot reach {url}: connection refused — is the server running on that port?")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return BackendError(f"{url} did not answer in time — is the server overloaded or stuck?")
    if isinstance(reason, socket.gaierror):
        return BackendError(f"cannot reach {url}: unknown host — check [backend] url")
    return BackendError(f"cannot reach {url}: {reason}")


def get_json(url: str, headers: dict[str, str] | None = None, *, key_env: str | None = None,
             timeout: float = 10.0) -> dict:
    try:
        with urllib.request.urlopen(_request(url, None, headers or {}), timeout=timeout) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError) as exc:
        raise _failure(url, exc, key_env) from None
    except ValueError:
        raise BackendError(f"{url} did not answer with JSON — is it the right server?") from None


def get_text(url: str, headers: dict[str, str] | None = None, *, timeout: float = 10.0) -> str | None:
    """A plain-text resource, or None when the server does not offer it (e.g. /metrics switched off)."""
    try:
        with urllib.request.urlopen(_request(url, None, headers or {}), timeout=timeout) as response:
            return response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None


def post_json(url: str, body: dict, headers: dict[str, str] | None = None, *, key_env: str | None = None,
              timeout: float = 30.0) -> dict:
    try:
        with urllib.request.urlopen(_request(url, body, headers or {}), timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except (urllib.error.URLError, OSError) as exc:
        raise _failure(url, exc, key_env) from None
    except ValueError:
        raise BackendError(f"{url} did not answer with JSON — is it the right server?") from None


WATCH_S = 0.1  # how often a stream asks whether to stop while it waits for the server


class EventStream:
    """The ``data:`` events of a server-sent event response, as parsed JSON; closing it ends the request.

    A stream waits on its socket — through the server's prefill, between chunks, for as long as the server takes —
    so a watcher asks ``should_stop`` every ``WATCH_S`` and, when told to, shuts the socket down: the wait ends at
    once (the server then drops the request), and the stream ends as ``aborted`` instead of failing.
    """

    def __init__(self, url: str, body: dict, headers: dict[str, str] | None = None, *, key_env: str | None = None,
                 timeout: float = TIMEOUT_S, should_stop: Callable[[], bool] | None = None) -> None:
        self.url, self.aborted = url, False
        parts = urllib.parse.urlsplit(url)
        connection = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._connection = connection(parts.hostname or "", parts.port, timeout=min(timeout, CONNECT_TIMEOUT_S))
        self._done = threading.Event()
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            self._connection.connect()
            self._connection.sock.settimeout(timeout)
            if should_stop is not None:
                threading.Thread(target=self._watch, args=(should_stop,), daemon=True).start()
            self._connection.request("POST", path or "/", json.dumps(body).encode(),
                                     {"Content-Type": "application/json", **(headers or {})})
            self._response = self._connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            if self.aborted:
                self._response = None
                return
            raise _failure(url, urllib.error.URLError(exc) if isinstance(exc, OSError) else exc, key_env) from None
        if self._response.status >= 400:
            error = urllib.error.HTTPError(url, self._response.status, self._response.reason, self._response.headers,
                                           self._response)
            failure = _failure(url, error, key_env)  # reads the body first
            self.close()
            raise failure

    def _watch(self, should_stop: Callable[[], bool]) -> None:
        while not self._done.wait(WATCH_S):
            if should_stop():
                self.aborted = True
                sock = self._connection.sock
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass  # already closed
                return

    def __iter__(self) -> Iterator[dict]:
        if self._response is None:
            return
        try:
            for raw in self._response:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:"):].strip()
                if payload == "[DONE]":
                    return
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    raise BackendError(f"{self.url} sent a malformed stream chunk ({payload[:60]!r}) — is it a"
                                       " llama-server or OpenAI-compatible endpoint?") from None
                if not isinstance(chunk, dict):
                    raise BackendError(f"{self.url} sent a stream chunk that is not an object ({payload[:60]!r})")
                if "error" in chunk:
                    error = chunk["error"]
                    raise BackendError(f"{self.url} reported an error mid-reply: "
                                       f"{error.get('message', error) if isinstance(error, dict) else error}")
                yield chunk
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if self.aborted:
                return
            raise BackendError(f"the server at {self.url} stopped in the middle of the reply ({type(exc).__name__})"
                               " — the partial reply is kept") from None

    def close(self) -> None:
        self._done.set()
        self._connection.close()
