"""The things a benchmark times: specchat with and without speculation, and peers doing the same task."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import open_backend
from ..engine import EngineConfig, Message, ReplyFinished, TokenEmitted
from ..errors import SpecchatError
from ..telemetry.memory import GpuMemory, gpu_memory, peak_rss_bytes, reset_peak_rss
from .tasks import Task


class PeerError(SpecchatError):
    """A peer could not be started or failed a run; the rest of the benchmark goes on."""


@dataclass
class RunResult:
    runner: str
    task: str
    rep: int  # -1 for the excluded warm-up
    ttft: float | None
    total: float
    generated: int
    decode_tps: float | None
    text: str
    tokens: list[int] | None = None
    drafted: int | None = None
    accepted: int | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    peak_rss: int | None = None
    vram_process: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


def _decode_tps(generated: int, total: float, ttft: float | None) -> float | None:
    if generated < 2 or ttft is None or total <= ttft:
        return None
    return (generated - 1) / (total - ttft)


def _vram(pid: int | None = None) -> int | None:
    gpu = gpu_memory(pid=pid)
    return gpu.process if isinstance(gpu, GpuMemory) else None


class SpecchatRunner:
    """One backend, switched between the profile's speculation and plain decoding without reloading anything.

    ``warm``: the n-gram drafter also remembers the replies of earlier runs (the same task's included), as llama-server's
    ngram-mod does; otherwise each run starts from its task's conversation alone, as a first answer would.
    """

    def __init__(self, config: EngineConfig, *, warm: bool = False) -> None:
        self.backend = open_backend(config)
        self.warm = warm
        self.configs = {
            "spec": config,
            "none": dataclasses.replace(config, spec=dataclasses.replace(config.spec, method="none")),
        }
        self.method = config.spec.method

    def name(self, mode: str) -> str:
        return f"specchat {self.method}" if mode == "spec" else "specchat none"

    def prompt_text(self, task: Task) -> str:
        """The task as the target reads it, rendered with the model's chat template (for peers that take raw text)."""
        return self.backend.render(self.messages_for(task) + [Message("user", task.prompt)])

    def messages_for(self, task: Task) -> list[Message]:
        system = self.backend.config.system_prompt
        return ([Message("system", system)] if system else []) + list(task.history)

    def run(self, task: Task, mode: str, rep: int) -> RunResult:
        backend = self.backend
        backend.apply(self.configs[mode])
        backend.clear_cache(replies=not self.warm)
        tokens: list[int] = []
        finished: ReplyFinished | None = None
        for event in backend.answer(self.messages_for(task), task.prompt, max_tokens=task.max_tokens):
            if isinstance(event, TokenEmitted):
                tokens.append(event.token)
            elif isinstance(event, ReplyFinished):
                finished = event
        assert finished is not None
        stats, text = finished.stats, finished.text
        spec = mode == "spec"
        return RunResult(
            runner=self.name(mode), task=task.name, rep=rep, ttft=stats.ttft, total=stats.t_total,
            generated=stats.generated, decode_tps=stats.decode_tps, text=text, tokens=tokens,
            drafted=stats.drafted if spec else None, accepted=stats.accepted if spec else None,
            acceptance_rate=stats.acceptance_rate if spec else None,
            mean_acceptance_length=stats.mean_acceptance_length if spec else None,
            peak_rss=peak_rss_bytes(), vram_process=_vram(),
            extra={"prefill_tokens": stats.prefill_tokens, "t_prefill": stats.t_prefill, "t_draft": stats.t_draft,
                   "t_verify": stats.t_verify, "t_overhead": stats.t_overhead, "steps": stats.steps,
                   "n_max_final": stats.n_max, "speculation_active": stats.speculation_active,
                   "finish_reason": finished.finish_reason},
        )

    def close(self) -> None:
        self.backend.close()


class LlamaCppPythonRunner:
    """llama-cpp-python's own high-level API: ``Llama.create_chat_completion``, optionally with prompt lookup."""

    def __init__(self, config: EngineConfig, *, lookup_tokens: int | None = None) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.label = "llama-cpp-python" + (f" lookup({lookup_tokens})" if lookup_tokens else "")
        draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens) if lookup_tokens else None
        try:
            self.llm = Llama(model_path=str(config.target.path), n_ctx=config.n_ctx, n_threads=config.target.threads,
                             n_threads_batch=config.target.threads, draft_model=draft, verbose=False)
        except ValueError as exc:
            raise PeerError(f"{self.label} could not load {config.target.path.name}: {exc}") from None
        self.config = config

    def name(self, _mode: str = "") -> str:
        return self.label

    def run(self, task: Task, rep: int, messages: list[Message]) -> RunResult:
        sampling = self.config.sampling
        self.llm.reset()
        reset_peak_rss()
        chunks: list[str] = []
        start = time.perf_counter()
        ttft = None
        stream = self.llm.create_chat_completion(
            messages=[{"role": m.role, "content": m.content} for m in messages] + [{"role": "user", "content": task.prompt}],
            max_tokens=task.max_tokens, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
            min_p=sampling.min_p, seed=sampling.seed, stream=True,
        )
        for chunk in stream:
            piece = chunk["choices"][0]["delta"].get("content")
            if piece:
                ttft = ttft if ttft is not None else time.perf_counter() - start
                chunks.append(piece)
        total = time.perf_counter() - start
        return RunResult(self.label, task.name, rep, ttft, total, len(chunks), _decode_tps(len(chunks), total, ttft),
                         "".join(chunks), peak_rss=peak_rss_bytes(), vram_process=_vram())

    def close(self) -> None:
        self.llm.close()


LLAMA_SERVER_TYPES = ("none", "ngram-simple", "ngram-map-k", "ngram-mod", "draft-simple")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServerRunner:
    """llama.cpp's native ``llama-server`` with one ``--spec-type``, on a loopback port, driven over HTTP.

    Some types keep what they saw across requests (ngram-mod's hash map, ngram-cache): unless ``warm``, the server is
    started afresh before each run, so every run is a first answer, as specchat's are then.
    """

    def __init__(self, binary: str, spec_type: str, config: EngineConfig, draft: Path | None, n_max: int, *,
                 warm: bool = False) -> None:
        self.label = f"llama-server {spec_type}"
        self.warm = warm
        resolved = shutil.which(binary) or (binary if Path(binary).is_file() else None)
        if resolved is None:
            raise PeerError(f"{self.label}: binary {binary!r} not found — build it (see README) or pass its path")
        self.port = _free_port()
        self.args = [resolved, "-m", str(config.target.path), "--host", "127.0.0.1", "--port", str(self.port),
                     "-t", str(config.target.threads), "-c", str(config.n_ctx), "-np", "1", "--spec-type", spec_type,
                     "--spec-draft-n-max", str(n_max)]
        if spec_type == "draft-simple":
            self.args += ["-md", str(draft), "-td", str(config.target.threads)]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
        self.config = config
        self._start()

    def _start(self) -> None:
        try:
            self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise PeerError(f"{self.label}: cannot start {self.args[0]}: {exc.strerror}") from None
        self._wait_ready(timeout=120)

    def _stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _last_log_line(self) -> str:
        self.log.flush()
        lines = [line.strip() for line in Path(self.log.name).read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise PeerError(f"{self.label} exited at start (code {code}): {self._last_log_line()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        self.close()
        raise PeerError(f"{self.label} did not become ready within {timeout:.0f} s: {self._last_log_line()}")

    def name(self, _mode: str = "") -> str:
        return self.label

    def run(self, task: Task, rep: int, prompt: str) -> RunResult:
        if not self.warm:
            self._stop()
            self._start()
        sampling = self.config.sampling
        body = json.dumps({
            "prompt": prompt, "n_predict": task.max_tokens, "temperature": sampling.temperature,
            "top_k": sampling.top_k, "top_p": sampling.top_p, "min_p": sampling.min_p, "seed": sampling.seed,
            "cache_prompt": False, "stream": False,
        }).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                         headers={"Content-Type": "application/json"})
        reset_peak_rss(self.proc.pid)
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                reply = json.loads(response.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError) as exc:
            raise PeerError(f"{self.label} failed on task {task.name}: {exc}") from None
        total = time.perf_counter() - start
        timings = reply.get("timings", {})
        generated = int(reply.get("tokens_predicted", timings.get("predicted_n", 0)))
        drafted = timings.get("draft_n")
        accepted = timings.get("draft_n_accepted")
        # The server reports prefill time; the first token follows it within one decode step.
        ttft = timings["prompt_ms"] / 1000 if "prompt_ms" in timings else None
        decode_tps = timings.get("predicted_per_second") or _decode_tps(generated, total, ttft)
        return RunResult(
            self.label, task.name, rep, ttft, total, generated, decode_tps, reply.get("content", ""),
            drafted=drafted, accepted=accepted,
            acceptance_rate=accepted / drafted if drafted else None,
            peak_rss=peak_rss_bytes(self.proc.pid), vram_process=_vram(self.proc.pid),
            extra={"timings": timings},
        )

    def close(self) -> None:
        self._stop()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
