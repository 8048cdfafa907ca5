"""What a benchmark times and what it records: specchat with and without speculation on one backend (the pair every
run has), a result per task, a question's turns as one; the peers beside them are ``peers``'."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends import Backend, open_backend
from ..backends.run_config import RunConfig
from ..engine import Message, ReplyFinished, TokenEmitted
from ..engine.engine_config import without_speculation
from ..errors import SpecchatError
from ..telemetry.memory import GpuMemory, gpu_memory, peak_rss_bytes
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
    decode_tps: float | None  # a question's, over all its turns (combine_turns); None on a single turn's result
    text: str
    tokens: list[int] | None = None
    drafted: int | None = None
    accepted: int | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    peak_rss: int | None = None
    vram_process: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


def decode_seconds(ttft: float | None, last: float | None) -> float | None:
    """Seconds from a turn's first token to its last (0 for a one-token turn); None where it was not timed."""
    return last - ttft if ttft is not None and last is not None else None


def combine_turns(runner: str, task: str, rep: int, turns: list[RunResult], *, spec: bool,
                  pid: int | None = None) -> RunResult:
    """One result for a question of one or more turns, as Spec-Bench sums a question's tokens and times over its
    turns: decode tok/s over every turn's decoding (each turn's prefill and first token apart), the question's TTFT
    that of its first turn (each turn's in ``extra``), counters summed."""
    # Each turn's decoding time from its first token to its last, summed: a short turn whose tokens came in one step
    # (a second turn copied whole) has no rate of its own, but its time and tokens still count.
    seconds = [t.extra.get("decode_s") for t in turns]
    decoded = sum(max(t.generated - 1, 0) for t in turns)
    timed = all(s is not None for s in seconds) and sum(seconds) > 0  # type: ignore[arg-type]
    decode_tps = decoded / sum(seconds) if timed and decoded > 0 else None  # type: ignore[arg-type]
    drafted = sum(t.drafted or 0 for t in turns)
    accepted = sum(t.accepted or 0 for t in turns)
    steps = sum(int(t.extra.get("steps", 0)) for t in turns)
    drafting_steps = sum(int(t.extra.get("drafting_steps", 0)) for t in turns)
    extra: dict[str, object] = {key: value for key, value in turns[-1].extra.items()}
    for key in ("prefill_tokens", "t_prefill", "t_draft", "t_verify", "t_overhead", "steps", "drafting_steps"):
        if key in extra:
            extra[key] = sum(t.extra[key] for t in turns)  # type: ignore[misc]
    extra["decode_s"] = sum(seconds) if timed else None  # type: ignore[arg-type]
    extra.update(turns=len(turns), ttft_turns=[t.ttft for t in turns], generated_turns=[t.generated for t in turns],
                 prompt_turns=[t.extra.get("prompt_tokens") for t in turns],
                 prefill_turns=[t.extra.get("prefill_tokens") for t in turns],
                 finish_turns=[t.extra.get("finish_reason") for t in turns], text_turns=[t.text for t in turns])
    # Spec-Bench's "mean accepted tokens": the tokens each target step yields (1.00 for plain decoding), where the
    # steps are known. The first token of each turn comes from its prefill; a turn that ends with the end-of-reply
    # token spent a step on it, which yielded it, though it is not shown.
    ended = sum(t.extra.get("finish_reason") == "stop" for t in turns)
    extra["step_tokens"] = decoded + ended
    extra["tokens_per_step"] = (decoded + ended) / steps if steps and "steps" in turns[0].extra else None
    return RunResult(
        runner=runner, task=task, rep=rep, ttft=turns[0].ttft, total=sum(t.total for t in turns),
        generated=sum(t.generated for t in turns), decode_tps=decode_tps, text="\n\n".join(t.text for t in turns),
        tokens=[tok for t in turns for tok in t.tokens] if all(t.tokens is not None for t in turns) else None,
        drafted=drafted if spec else None, accepted=accepted if spec else None,
        acceptance_rate=accepted / drafted if spec and drafted else None,
        mean_acceptance_length=1 + accepted / drafting_steps if spec and drafting_steps else None,
        peak_rss=peak_rss_bytes(pid), vram_process=_vram(pid), extra=extra,
    )


def conversation_before(config: RunConfig, task: Task) -> list[Message]:
    """The conversation a task continues: the profile's system prompt, then the task's own earlier turns."""
    system = config.system_prompt
    return ([Message("system", system)] if system else []) + list(task.earlier)


def _vram(pid: int | None = None) -> int | None:
    gpu = gpu_memory(pid=pid)
    return gpu.process if isinstance(gpu, GpuMemory) else None


class BackendRunner:
    """One configuration answered through a backend — specchat's own, or llama-server for a peer — each run a first
    answer: caches are cleared, and unless ``warm`` what the drafter (or ngram-mod's map) remembered from earlier runs
    is forgotten. Runners may share a backend; each switches it to its configuration first."""

    def __init__(self, label: str, backend: Backend, config: RunConfig, *, warm: bool = False,
                 owns: bool = True) -> None:
        self.label, self.backend, self.config, self.warm, self.owns = label, backend, config, warm, owns

    def name(self) -> str:
        return self.label

    def run(self, task: Task, rep: int) -> RunResult:
        backend = self.backend
        try:
            backend.apply(self.config)
            backend.clear_cache(replies=not self.warm)
            earlier = conversation_before(self.config, task)
            turns = []
            for prompt in task.turns():
                turn = self._turn(earlier, prompt, task.max_tokens)
                turns.append(turn)
                # The next turn follows this runner's own reply, as Spec-Bench runs MT-bench's second turn.
                earlier += [Message("user", prompt), Message("assistant", turn.text, turn.tokens,
                                                             str(turn.extra.get("finish_reason")))]
        except SpecchatError as exc:
            raise PeerError(f"{self.label} failed on task {task.name}: {exc}") from None
        return combine_turns(self.label, task.name, rep, turns, spec=self.config.spec.method != "none",
                             pid=backend.pid)

    def _turn(self, earlier: list[Message], prompt: str, max_tokens: int) -> RunResult:
        tokens: list[int] = []
        finished: ReplyFinished | None = None
        for event in self.backend.answer(earlier, prompt, max_tokens=max_tokens):
            if isinstance(event, TokenEmitted):
                tokens.append(event.token)
            elif isinstance(event, ReplyFinished):
                finished = event
        assert finished is not None
        stats = finished.stats
        return RunResult(
            runner=self.label, task="", rep=0, ttft=stats.ttft, total=stats.t_total,
            generated=stats.generated, decode_tps=None, text=finished.text, tokens=tokens,
            drafted=stats.drafted, accepted=stats.accepted,
            extra={"prompt_tokens": stats.prompt_tokens, "prefill_tokens": stats.prefill_tokens,
                   "t_prefill": stats.t_prefill, "t_draft": stats.t_draft,
                   "t_verify": stats.t_verify, "t_overhead": stats.t_overhead, "steps": stats.steps,
                   "drafting_steps": stats.drafting_steps, "decode_s": decode_seconds(stats.ttft, stats.t_last_token), "draft_length_final": stats.draft_length,
                   "speculation_active": stats.speculation_active, "finish_reason": finished.finish_reason},
        )

    def close(self) -> None:
        if self.owns:
            self.backend.close()


def specchat_runners(config: RunConfig, *, warm: bool) -> tuple[BackendRunner, BackendRunner]:
    """The profile with its speculation and the same profile plain, on one backend (switched, not reloaded)."""
    backend = open_backend(config)
    where = "specchat" if config.backend_kind.runs_engine else f"specchat via {config.backend.kind}"
    plain = without_speculation(config)
    return (BackendRunner(BASELINE, backend, plain, warm=warm),
            BackendRunner(f"{where} {config.spec.method}", backend, config, warm=warm, owns=False))


BASELINE = "specchat none"
