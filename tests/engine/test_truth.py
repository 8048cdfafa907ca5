"""What the engine reports must be true: the order of a step's events, sampled exactness at the end of a reply,
counters defined as vLLM and llama.cpp define them, and llama.cpp's own compatibility rule."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import THREADS, Run, run
from gguf_fixtures import write_variant, write_vocab_gguf
from scipy.stats import chi2_contingency, chisquare
from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig
from specchat.engine.core import Engine
from specchat.engine.drafters.model import ModelDrafter
from specchat.engine.events import DraftRejected, StepVerified, TokenEmitted, TokenKind
from specchat.engine.llama import SequenceCache
from specchat.engine.loop import speculate
from specchat.engine.rules import Rules
from specchat.engine.sampling import SamplingParams
from specchat.engine.stats import ReplyStats

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."


def split_steps(r: Run) -> tuple[TokenEmitted, list[list[object]]]:
    """The prefill's token, then each verify step's events up to and including its ``StepVerified``."""
    body = [e for e in r.events if isinstance(e, (TokenEmitted, DraftRejected, StepVerified))]
    first, steps, current = body[0], [], []
    for event in body[1:]:
        current.append(event)
        if isinstance(event, StepVerified):
            steps.append(current)
            current = []
    assert not current, "every step ends with its StepVerified"
    return first, steps


def check_step_order(r: Run) -> int:
    """Each step: its accepted tokens, then the rejected tail, then the correction or bonus, then StepVerified.
    Returns how many steps had both accepted and rejected draft tokens (where the order matters)."""
    first, steps = split_steps(r)
    assert first.step == 0 and first.kind == TokenKind.TARGET
    mixed = 0
    for i, events in enumerate(steps):
        verified = events[-1]
        assert all(e.step == verified.step for e in events)
        body = events[:-1]
        shown = [e for e in body if isinstance(e, TokenEmitted) and e.kind == TokenKind.ACCEPTED]
        assert body[: len(shown)] == shown, "accepted tokens come first"
        rest = body[len(shown):]
        last_step = i == len(steps) - 1
        ended_on_draft = last_step and r.finished.stats.end_from_draft
        assert len(shown) == verified.accepted - ended_on_draft
        if verified.accepted < verified.drafted:
            assert isinstance(rest[0], DraftRejected) and len(rest[0].tokens) == verified.drafted - verified.accepted
            rest, kind = rest[1:], TokenKind.CORRECTED
            mixed += verified.accepted > 0
        else:
            kind = TokenKind.BONUS if verified.drafted else TokenKind.TARGET
        assert all(isinstance(e, TokenEmitted) and e.kind == kind for e in rest) and len(rest) <= 1
        if not rest:  # the target's token was the end of the reply, or the draft's accepted end token was
            assert last_step and r.finished.finish_reason == "stop"
    return mixed


def test_each_step_emits_accepted_then_rejected_then_correction_then_verified(make_engine):
    engine = make_engine("draft", n_max=4)
    mixed = 0
    for prompt in (PROMPT, "List five countries in Europe and their capitals."):
        engine.new_chat()
        mixed += check_step_order(run(engine, prompt, max_tokens=96))
    assert mixed >= 3, "steps with accepted and rejected draft tokens are the case the order matters for"


def test_ngram_steps_follow_the_same_order(make_engine):
    engine = make_engine("ngram", n_max=6)
    reply = run(engine, "Repeat the following sentence three times: The quick brown fox jumps over the lazy dog.",
                max_tokens=64)
    check_step_order(reply)
    stats = reply.finished.stats
    assert stats.drafted > 0 and stats.accepted > 0 and reply.rejected  # the order was checked on real drafts


# -- sampled exactness at the end of a reply ----------------------------------------------------------------------


class SyntheticModel(SequenceCache):
    """A model whose next-token logits depend only on the last token: p or q written down by hand."""

    def __init__(self, table: dict[int, list[float]], n_vocab: int) -> None:
        super().__init__()
        self.table, self.n_vocab = table, n_vocab
        self._rows = np.zeros((1, n_vocab))

    def _next(self, token: int) -> np.ndarray:
        probs = np.asarray(self.table.get(token, self.table[-1]), dtype=float)
        with np.errstate(divide="ignore"):
            return np.log(probs)

    def decode(self, tokens, *, all_logits: bool = False) -> None:
        self.cached.extend(tokens)
        rows = [self._next(t) for t in tokens]
        self._rows = np.array(rows if all_logits else rows[-1:])

    def logits(self) -> np.ndarray:
        return self._rows

    def truncate(self, n_keep: int) -> None:
        del self.cached[n_keep:]


class Vocabulary:
    def __init__(self, n_vocab: int, eog: set[int]) -> None:
        self.n_vocab, self.eog = n_vocab, eog

    def is_eog(self, token: int) -> bool:
        return token in self.eog


Y, Z, EOS = 0, 1, 2
UNBIASED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)


def first_tokens(p: dict[int, list[float]], q: dict[int, list[float]], *, n_min: int = 0, p_min: float = 0.0,
                 k: int = 2, draws: int = 20_000) -> Counter:
    """The token that follows the prompt, drawn ``draws`` times through ``speculate``: draft, verify, roll back."""
    vocab = Vocabulary(3, {EOS})
    rng, draft_rng = np.random.default_rng(11), np.random.default_rng(12)
    rules = Rules(UNBIASED, rng, draft_rng, vocab, n_min=n_min, p_min=p_min)
    target, drafter = SyntheticModel(p, 3), ModelDrafter(SyntheticModel(q, 3), 3)
    seen: Counter = Counter()
    for _ in range(draws):
        target.truncate(0)
        outcome = speculate(target, [Y], drafter, k, rules)
        shown = outcome.accepted + ([outcome.token] if outcome.token is not None else [])
        seen[shown[0] if shown else EOS] += 1  # nothing shown: the draft's end token was accepted
    return seen


def assert_follows(seen: Counter, p: list[float]) -> None:
    counts = np.array([seen[t] for t in range(len(p))], dtype=float)
    support = [i for i, x in enumerate(p) if x > 0]
    assert counts[[i for i in range(len(p)) if p[i] == 0]].sum() == 0
    assert chisquare(counts[support], np.array(p)[support] * counts.sum()).pvalue > 1e-3, dict(seen)


def test_a_drafted_end_token_is_judged_by_the_rule():
    """The worked example of issue #10: p = (y .5, EOS .5), q = (y .6, EOS .4). Cutting EOS out of the draft and then
    sampling that position from p gives EOS with probability .3; the rejection rule gives .5."""
    p = {-1: [0.5, 0.0, 0.5]}
    q = {-1: [0.6, 0.0, 0.4]}
    assert_follows(first_tokens(p, q), [0.5, 0.0, 0.5])


def test_a_sampled_draft_is_never_discarded_for_being_short():
    """Discarding a sampled draft shorter than n_min makes the discard depend on what was drafted: here a draft that
    starts with z stops at once (low confidence after z), a draft that starts with y goes on. Exact only if the
    short draft is judged by the rule too."""
    p = {-1: [0.5, 0.5, 0.0]}
    q = {-1: [0.6, 0.4, 0.0], Y: [0.9, 0.1, 0.0], Z: [0.4, 0.3, 0.3]}
    assert_follows(first_tokens(p, q, n_min=2, p_min=0.5), [0.5, 0.5, 0.0])


def test_an_accepted_end_token_ends_the_step_without_a_bonus():
    p = {-1: [0.0, 0.0, 1.0]}
    q = {-1: [0.0, 0.0, 1.0]}
    vocab = Vocabulary(3, {EOS})
    rules = Rules(UNBIASED, np.random.default_rng(0), np.random.default_rng(1), vocab)
    target = SyntheticModel(p, 3)
    target.decode([Y])  # the cache holds the conversation but its newest token
    outcome = speculate(target, [Y, Z], ModelDrafter(SyntheticModel(q, 3), 3), 4, rules)
    assert outcome.drafted == 1 and outcome.n_accepted == 1 and outcome.ends_reply
    assert outcome.accepted == [] and outcome.token is None
    assert target.cached == [Y, Z]  # the end token is not left in the cache


@pytest.mark.slow
def test_reply_lengths_with_and_without_a_draft_agree_when_sampling(make_engine):
    """End to end on the real pair at temperature 1: the distribution of reply lengths must not depend on the draft."""
    sampling = SamplingParams(temperature=1.0, seed=3)
    lengths: dict[str, Counter] = {}
    for method in ("none", "draft"):
        engine = make_engine(method, sampling=sampling, n_max=4, system_prompt="Reply with one word only.")
        tally: Counter = Counter()
        for _ in range(300):
            engine.new_chat()
            finished = run(engine, "Is water wet? Yes or no.", max_tokens=8).finished
            tally[finished.stats.generated if finished.finish_reason == "stop" else "cap"] += 1
        lengths[method] = tally
    keys = sorted(set(lengths["none"]) | set(lengths["draft"]), key=str)
    table = np.array([[lengths[m].get(k, 0) for k in keys] for m in ("none", "draft")])
    pooled, acc = [], np.zeros(2)
    for column in table.T:  # pool rare lengths so every cell has a reasonable expectation
        acc = acc + column
        if acc.sum() >= 20:
            pooled.append(acc)
            acc = np.zeros(2)
    if acc.sum():
        pooled[-1] = pooled[-1] + acc
    assert chi2_contingency(np.array(pooled).T).pvalue > 1e-3, lengths


# -- counters as vLLM and llama.cpp define them ---------------------------------------------------------------


def test_position_rates_are_accepted_at_position_over_drafting_steps():
    stats = ReplyStats()
    for drafted, accepted in ((4, 1), (4, 4), (0, 0), (4, 0)):
        stats.record_step(drafted, accepted, ignored=0)
    assert stats.drafting_steps == 3 and stats.steps == 4
    # vLLM's num_accepted_tokens_per_pos / num_drafts, llama.cpp's n_accept per position / n_draft calls.
    assert stats.position_rates == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert stats.mean_acceptance_length == pytest.approx(1 + 5 / 3)
    assert stats.acceptance_rate == pytest.approx(5 / 12)
    assert stats.accepted + stats.rejected == stats.drafted == 12


def test_draft_tokens_withheld_by_p_min_are_counted(make_engine):
    engine = make_engine("draft", n_max=6, p_min=0.6)
    r = run(engine, PROMPT, max_tokens=64)
    stats = r.finished.stats
    assert stats.withheld > 0, "a confident-only draft stops early somewhere in a reply this long"
    assert stats.withheld == sum(s.withheld for s in r.steps)


# -- llama.cpp's compatibility rule ----------------------------------------------------------------------------


def test_eos_ids_are_compared_only_when_add_eos_is_set(tmp_path, target_path):
    from specchat.engine.compat import check_pair

    other_eos = write_variant(target_path, tmp_path / "eos.gguf", set_keys={"tokenizer.ggml.eos_token_id": 0},
                              header_only=True)
    assert check_pair(target_path, other_eos) == []  # add_eos is false in both: llama.cpp does not compare the ids
    both_add = write_variant(target_path, tmp_path / "add.gguf", set_keys={"tokenizer.ggml.add_eos_token": True},
                             header_only=True)
    both_add_other = write_variant(target_path, tmp_path / "add-other.gguf",
                                   set_keys={"tokenizer.ggml.add_eos_token": True, "tokenizer.ggml.eos_token_id": 0},
                                   header_only=True)
    assert check_pair(both_add, both_add) == []
    problems = check_pair(both_add, both_add_other)
    assert len(problems) == 1 and "EOS differs" in problems[0]


def test_a_missing_add_bos_key_takes_the_tokenizers_default(tmp_path, target_path):
    from specchat.engine.compat import check_pair

    # A llama-bpe tokenizer adds BOS unless its GGUF says otherwise (llama.cpp's llama-vocab.cpp).
    implicit = write_variant(target_path, tmp_path / "implicit.gguf", drop_keys=("tokenizer.ggml.add_bos_token",),
                             set_keys={"tokenizer.ggml.pre": "llama-bpe"}, header_only=True)
    explicit = write_variant(target_path, tmp_path / "explicit.gguf",
                             set_keys={"tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.add_bos_token": False},
                             header_only=True)
    problems = check_pair(implicit, explicit)
    assert len(problems) == 1 and "BOS differs" in problems[0] and "add_bos=True" in problems[0]


def test_a_vocabulary_that_lists_a_token_twice_is_refused_before_llama_cpp_sees_it(tmp_path, target_path):
    """llama.cpp aborts the whole process on such a file (an assertion in llama-vocab.cpp)."""
    from gguf_fixtures import smollm_tokens
    from specchat.engine.compat import check_pair
    from specchat.errors import ModelError

    twice = write_vocab_gguf(target_path, tmp_path / "twice.gguf", smollm_tokens(target_path) + ["x", "x"])
    with pytest.raises(ModelError, match="lists the token 'x' twice"):
        check_pair(target_path, twice)


def test_vocabulary_sizes_within_128_are_compatible(tmp_path, target_path):
    from gguf_fixtures import smollm_tokens
    from specchat.engine.compat import check_pair

    tokens = smollm_tokens(target_path)
    extra = [f"<extra {i}>" for i in range(129)]
    assert check_pair(target_path, write_vocab_gguf(target_path, tmp_path / "more.gguf", tokens + extra[:128])) == []
    problems = check_pair(target_path, write_vocab_gguf(target_path, tmp_path / "many.gguf", tokens + extra))
    assert problems and "differ by 129" in problems[0]


@pytest.fixture(scope="module")
def vocab_variants(target_path, tmp_path_factory) -> dict[str, Path]:
    """Runnable drafts whose vocabulary is 4 tokens larger (duplicates the draft prefers) or 8 tokens smaller."""
    from specchat.engine.llama import Model

    model = Model(target_path)
    try:
        common = {f"<dup{i}>": model.tokenize(text, add_special=False)[0] for i, text in enumerate((" the", ",", ".", "\n"))}
        last = model.detokenize([model.n_vocab - 3])
    finally:
        model.close()
    folder = tmp_path_factory.mktemp("vocab")
    return {
        "larger": write_variant(target_path, folder / "larger.gguf", extra_tokens=common),
        "smaller": write_variant(target_path, folder / "smaller.gguf", drop_tokens=8),
        "last_token_text": last,
    }


def _engine(target: Path, draft: Path, sampling: SamplingParams | None = None) -> Engine:
    return Engine(EngineConfig(ModelSettings(target, threads=THREADS), ModelSettings(draft, threads=THREADS),
                               SpecConfig("draft", n_max=4), sampling or SamplingParams(), n_ctx=1024))


@pytest.mark.parametrize("which", ["larger", "smaller"])
def test_tokens_in_only_one_vocabulary_never_crash_drafting(which, vocab_variants, target_path, make_engine):
    prompt = f"Repeat after me: the cat, the dog.{vocab_variants['last_token_text']} and the bird."
    plain = run(make_engine("none", n_ctx=1024, system_prompt=None), prompt, max_tokens=48)
    engine = _engine(target_path, vocab_variants[which])
    try:
        speculative = run(engine, prompt, max_tokens=48)
        assert speculative.ids == plain.ids
        stats = speculative.finished.stats
        assert stats.accepted + stats.rejected == stats.drafted
        if which == "larger":  # the draft proposed ids the target does not have, and the target rejected them
            proposed = [t for e in speculative.rejected for t in e.tokens]
            assert any(t >= engine.target.n_vocab for t in proposed)
        else:  # the conversation holds an id the draft does not have: no drafting, and the sidebar says why
            assert engine.target.n_vocab - 3 in engine.tokens
            assert not stats.speculation_active and "cannot read token" in stats.speculation_reason
        sampled = _engine(target_path, vocab_variants[which], SamplingParams(temperature=0.8, seed=1))
        try:
            assert run(sampled, prompt, max_tokens=32).finished.stats.generated > 0
        finally:
            sampled.close()
    finally:
        engine.close()


# -- chat templates --------------------------------------------------------------------------------------------


def test_a_gguf_without_a_chat_template_says_so_and_a_profile_can_name_one(tmp_path, target_path):
    from specchat.errors import ConfigError
    from helpers import cli

    bare = write_variant(target_path, tmp_path / "bare.gguf", drop_keys=("tokenizer.chat_template",))
    messages = [{"role": "user", "content": "Hi"}]
    engine = Engine(EngineConfig(ModelSettings(bare, threads=THREADS), n_ctx=512))
    try:
        assert len(engine.notes) == 1 and "bare.gguf carries no chat template; using chatml" in engine.notes[0]
        fallback = engine.template.render(messages, add_generation_prompt=True)
    finally:
        engine.close()
    assert fallback == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"  # llama.cpp's own ChatML
    named = Engine(EngineConfig(ModelSettings(bare, threads=THREADS), n_ctx=512, chat_template="llama3"))
    try:
        assert named.notes == []
        assert named.template.render(messages, add_generation_prompt=True).startswith("<|start_header_id|>user")
    finally:
        named.close()
    jinja = tmp_path / "mine.jinja"
    jinja.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] ")
    profile = tmp_path / "mine.toml"
    profile.write_text(f'[target]\nmodel = "{bare}"\nn_ctx = 512\n[chat]\ntemplate = "mine.jinja"\n')
    result = cli("ask", "--json", "--profile", str(profile), "--max-tokens", "8", "Hi")
    assert result.returncode == 0 and "note" not in result.stderr, result.stderr
    with pytest.raises(ConfigError, match="unknown chat template 'nope' — give a Jinja file or one of .*chatml"):
        Engine(EngineConfig(ModelSettings(bare, threads=THREADS), n_ctx=512, chat_template="nope"))
    noted = cli("ask", "--profile", str(profile_without_template(tmp_path, bare)), "--max-tokens", "4", "Hi")
    assert noted.returncode == 0
    assert [line for line in noted.stderr.splitlines() if line.strip()] == [
        f"specchat: note: {bare.name} carries no chat template; using chatml — if replies look wrong, set [chat]"
        " template in the profile to a Jinja file or one of llama.cpp's names (see: specchat profiles templates)"]


def profile_without_template(tmp_path: Path, model: Path) -> Path:
    path = tmp_path / "plain.toml"
    path.write_text(f'[target]\nmodel = "{model}"\nn_ctx = 512\n')
    return path


def test_verify_batches_stay_within_what_this_backend_computes_exactly(make_engine, target_path):
    """llama.cpp's CPU backend computes large batches with other kernels whose logits differ from one-at-a-time
    decoding; the engine measures up to which size they agree and never verifies more in one batch."""
    from specchat.engine.llama import Context, Model

    engine = make_engine("ngram", n_max=64)
    cap = engine.speculation.max_verify
    assert cap is not None and cap >= 8
    text = ("The lighthouse at Cape Morrow was built in 1872 to guide ships around a reef that had claimed more than"
            " forty vessels. For over a century, keepers lived in a small stone house beside the tower.")
    r = run(engine, f"Repeat this text exactly, twice:\n{text}", max_tokens=160)
    assert max(s.drafted for s in r.steps) + 1 <= cap
    model = Model(target_path)  # independently of the sweep: real text, one token at a time and as one batch
    try:
        tokens = model.tokenize(text, add_special=False)[:cap]
        one, batch = Context(model, n_ctx=512, threads=THREADS), Context(model, n_ctx=512, threads=THREADS)
        rows = []
        for token in tokens:
            one.decode([token])
            rows.append(one.logits()[-1].copy())
        batch.decode(tokens, all_logits=True)
        assert np.array_equal(batch.logits(), np.stack(rows))
        one.close()
        batch.close()
    finally:
        model.close()
