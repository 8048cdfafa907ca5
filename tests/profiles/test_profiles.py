"""Profiles: presets, validation messages, model lookup, compatibility and fit checks, editing, hot switching."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
from helpers import THREADS, cli, run
from gguf_fixtures import write_scrambled_copy, write_vocab_gguf
from specchat import profiles
from specchat.engine import EngineConfig, ModelSettings, SpecConfig
from specchat.engine.gguf_header import read_metadata
from specchat.errors import ConfigError, IncompatibleDraftError, ModelError
from specchat.profiles.fit import GB, FitReport, Footprint, kv_cache_bytes

BUNDLED = ["baseline", "gemma4-12b-qat-mtp", "ngram", "ngram-draft", "qwen3-4b-0.6b", "qwen3-8b-1.7b", "server-draft-mtp",
           "server-ngram-simple", "server-none", "server-tiny", "suffix", "suffix-draft", "tiny"]


pytestmark = pytest.mark.usefixtures("isolated_user_dirs")


def test_every_preset_parses_and_validates():
    found = profiles.available_profiles()
    assert sorted(found) == BUNDLED
    for name in BUNDLED:
        profile = profiles.load_profile(name)
        assert profile.description, f"{name} needs a one-line description comment"
        assert profile.path.read_text().count("#") >= 3, f"{name} should be commented for a newcomer"
    qwen = profiles.load_profile("qwen3-8b-1.7b").values
    assert (qwen["draft"]["n_max"], qwen["draft"]["n_min"], qwen["target"]["n_ctx"]) == (3, 0, 4096)
    gemma = profiles.load_profile("gemma4-12b-qat-mtp").values["draft"]
    assert (gemma["method"], gemma["n_max"], gemma["n_min"]) == ("mtp", 2, 1)
    assert profiles.load_profile("baseline").values["draft"]["method"] == "none"
    assert profiles.load_profile("ngram").values["draft"]["method"] == "ngram"


def test_presets_with_embedded_models_build_run_configs():
    for name, method in (("tiny", "draft"), ("ngram", "ngram"), ("baseline", "none"), ("ngram-draft", "ngram+draft"),
                         ("suffix", "suffix"), ("suffix-draft", "suffix+draft")):
        config = profiles.run_config(profiles.load_profile(name))
        assert config.spec.method == method and config.target.path.is_file()
        assert (config.draft is not None) == (method in ("draft", "ngram+draft", "suffix+draft"))
    assert profiles.run_config(profiles.load_profile("ngram")).spec.adaptive


def test_mtp_profiles_run_through_llama_server():
    for name in ("gemma4-12b-qat-mtp", "server-draft-mtp"):
        values = profiles.load_profile(name).values
        assert values["draft"]["method"] == "mtp"
        assert (values["backend"]["kind"], values["backend"]["spec_type"]) == ("llama-server", "draft-mtp")
    recipe = [profiles.load_profile(f"server-{kind}").values for kind in ("none", "ngram-simple", "draft-mtp")]
    assert len({(v["target"]["model"], v["target"]["n_ctx"], tuple(v["sampling"].items())) for v in recipe}) == 1
    config = profiles.run_config(profiles.load_profile("server-tiny"))
    assert config.backend.kind == "llama-server" and config.backend.spec_type == "draft-simple"
    assert config.draft is not None and config.target.path.is_file()


def test_missing_named_model_says_where_it_looked_and_how_to_get_it():
    with pytest.raises(ModelError) as err:
        profiles.run_config(profiles.load_profile("qwen3-8b-1.7b"))
    message = str(err.value)
    assert "Qwen3-8B-Q4_K_M.gguf" in message and ".lmstudio/models" in message and "huggingface/hub" in message
    assert 'search "Qwen3 8B"' in message


GOOD = """[target]
model = "embedded:target"
[draft]
method = "ngram"
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[target\nmodel = 1", r"p\.toml:1: malformed TOML"),
        (GOOD + "[sampling]\ntemprature = 0.5\n", r"p\.toml:6: \[sampling\] temprature: unknown key — did you mean 'temperature'\?"),
        (GOOD + "[sampler]\ntemperature = 0.5\n", r"p\.toml:5: \[sampler\]: unknown section — did you mean 'sampling'\?"),
        (GOOD + "n_max = \"lots\"\n", r"p\.toml:5: \[draft\] n_max: got 'lots', expected an integer from 1 to 256 or \"auto\""),
        (GOOD + "n_max = 0\n", r"\[draft\] n_max: got 0, expected an integer from 1 to 256"),
        (GOOD + "p_min = 1.5\n", r"\[draft\] p_min: got 1.5, expected a probability in \[0, 1\]"),
        (GOOD + "n_max = 2\nn_min = 3\n", r"\[draft\] n_min: n_min 3 exceeds n_max 2"),
        (GOOD + "ngram_min = 5\n", r"ngram_min exceeds ngram_max"),
        (GOOD + "[sampling]\ntemperature = -1\n", r"p\.toml:6: \[sampling\] temperature: got -1, expected a number from 0 \(greedy\) to 100"),
        (GOOD + "[sampling]\ntop_k = true\n", r"\[sampling\] top_k: got True, expected an integer from 0 \(off\)"),
        ("[draft]\nmethod = \"ngram\"\n", r"\[target\] model is missing"),
        ("[target]\nmodel = \"x.gguf\"\n[draft]\nmethod = \"draft\"\n", r"p\.toml:4: \[draft\] method: method 'draft' needs \[draft\] model"),
        ("[target]\nmodel = \"x.gguf\"\n[draft]\nmethod = \"ngram+draft\"\n",
         r"p\.toml:4: \[draft\] method: method 'ngram\+draft' needs \[draft\] model"),
        (GOOD.replace('"ngram"', '"magic"'),
         r"p\.toml:4: \[draft\] method: got 'magic', expected one of none, draft, ngram, ngram\+draft, suffix, suffix\+draft,"
         r" mtp"),
        (GOOD + '[backend]\nkind = "llama-server"\nspec_type = "ngram-mod,draft-warp"\n',
         r"p\.toml:7: \[backend\] spec_type: got 'ngram-mod,draft-warp', expected one of llama.cpp's spec types"),
        (GOOD + '[backend]\nkind = "llama-server"\nspec_type = "ngram-mod, draft-simple"\n',
         r"spec_type: got 'ngram-mod, draft-simple', expected .* or a comma-separated list of them without spaces"),
        (GOOD + '[backend]\nkind = "llama-server"\nspec_type = "draft-warp"\n',
         r"p\.toml:7: \[backend\] spec_type: got 'draft-warp', expected one of llama.cpp's spec types: none, draft-simple"),
        (GOOD + '[backend]\nkind = "cloud"\n', r"\[backend\] kind: got 'cloud', expected one of local, llama-server, remote"),
        (GOOD + '[backend]\nkind = "remote"\n', r"p\.toml:6: \[backend\] kind: a remote backend needs \[backend\] url"),
        (GOOD + '[backend]\nkind = "remote"\nurl = "gpu-box:8080"\n', r"\[backend\] url: got 'gpu-box:8080', expected an http://"),
        (GOOD + '[backend]\nspec_type = "ngram-mod"\n', r"p\.toml:6: \[backend\] spec_type: spec_type applies to a llama-server"),
        (GOOD + '[backend]\nkind = "remote"\nurl = "http://x"\napi_key_env = "sk-123 secret"\n',
         r"\[backend\] api_key_env: got 'sk-123 secret', expected the NAME of an environment variable"),
        (GOOD.replace('"ngram"', '"mtp"'), r"p\.toml:4: \[draft\] method: method 'mtp' needs a llama.cpp server"),
    ],
)
def test_validation_errors_name_file_line_and_expectation(tmp_path, text, expected):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        profiles.load_profile(str(path))
    result = cli("ask", "--profile", str(path), "hi")
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_models_are_found_by_path_and_by_name(tmp_path, monkeypatch, target_path):
    shelf = tmp_path / "shelf" / "lmstudio-community" / "SmolLM2"
    shelf.mkdir(parents=True)
    (shelf / "Smol-Q4_1.gguf").symlink_to(target_path)
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(tmp_path / "shelf"))
    profile_dir = tmp_path / "profiles"
    profile_dir.mkdir()
    (profile_dir / "beside.gguf").symlink_to(target_path)
    for reference in ("Smol-Q4_1.gguf", "smol-q4_1", "beside.gguf", "./beside.gguf", str(target_path)):
        path = profile_dir / "p.toml"
        path.write_text(f'[target]\nmodel = "{reference}"\n')
        config = profiles.run_config(profiles.load_profile(str(path)))
        assert config.target.path.resolve() == target_path.resolve(), reference


def test_kv_cache_arithmetic_by_hand(target_path, tmp_path):
    # SmolLM2-135M: 30 layers, 3 KV heads, head size 576 / 9 = 64, f16 → 30·3·(64+64)·2 bytes per token.
    assert kv_cache_bytes(read_metadata(target_path), 4096) == 30 * 3 * 128 * 2 * 4096 == 94_371_840
    # q8_0 (the target's default): blocks of 32 values in 34 bytes.
    assert kv_cache_bytes(read_metadata(target_path), 4096, "q8_0") == 30 * 3 * 128 * 4096 * 34 // 32 == 50_135_040
    # A Qwen3-8B-shaped header: 36 layers, 8 KV heads of 128 → 36·8·256·2 = 147,456 bytes per token.
    path = tmp_path / "qwen-shaped.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen3")
    writer.add_block_count(36)
    writer.add_embedding_length(4096)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    writer.add_key_length(128)
    writer.add_value_length(128)
    writer.add_tensor("x", np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert kv_cache_bytes(read_metadata(path), 4096) == 147_456 * 4096 == 603_979_776


def test_fit_verdicts_by_hand():
    target = Footprint("target", "8B", 5.03 * GB, 0.604 * GB, 1.0)
    draft = Footprint("draft", "1.7B", 1.28 * GB, 0.470 * GB, 1.0)
    report = FitReport([target, draft], vram=12 * GB, ram=16 * GB, margin=2 * GB)
    # 12 − (5.03 + 0.604 + 1.28 + 0.470) − 2 = 2.616 GB
    assert report.vram_left == pytest.approx(2.616 * GB)
    assert report.verdicts() == ["fits in 12 GB VRAM with 2.6 GB to spare"]
    small = FitReport([target, draft], vram=8 * GB, ram=16 * GB, margin=2 * GB)
    assert small.vram_left == pytest.approx(-1.384 * GB)
    assert small.verdicts()[0].startswith("does not fit in 8 GB VRAM: 1.4 GB over")
    assert small.verdicts()[1] == "risk: 1.4 GB offloaded to RAM slows every step (fits in 16 GB RAM)"
    tiny_ram = FitReport([target, draft], vram=4 * GB, ram=8 * GB, margin=2 * GB)
    assert tiny_ram.verdicts()[1].startswith("RISK: 5.4 GB offloaded to RAM exceeds the ~2 GB free of 8 GB RAM")
    partial = FitReport([dataclasses.replace(target, share=0.5), draft], vram=12 * GB, ram=16 * GB, margin=2 * GB)
    assert partial.on_cpu == pytest.approx((5.03 + 0.604) / 2 * GB)
    # An AMX CPU's repacked copy counts for the half on the CPU only; the GPU's half is as before.
    repacking = FitReport([dataclasses.replace(target, share=0.5, repacked=5.03 * GB), draft], vram=12 * GB,
                          ram=16 * GB, margin=2 * GB)
    assert repacking.on_cpu == pytest.approx((5.03 + 0.604 + 5.03) / 2 * GB)
    assert repacking.on_gpu == partial.on_gpu


def test_the_repacked_copy_is_counted_only_for_a_cpu_only_build_made_here(tmp_path, monkeypatch):
    """An AMX CPU that runs it (faked: whether this one does is the memory test's, against llama.cpp's own log): a
    CPU-only build here keeps the copy; a GPU build's host buffers do not, nor is a remote server's or a server binary
    from elsewhere counted — only one ``specchat server build`` compiled here for the CPU."""
    from specchat.backends.offload import LlamaBuild
    from specchat.backends.server_build import ENV, RECORD
    from specchat.profiles import plan as planning

    monkeypatch.setattr(planning, "cpu_repacks_weights", lambda: True)
    server = profiles.load_profile("server-tiny")
    cpu = LlamaBuild("llama-cpp-python (in-process)", False, ("CPU",))
    assert planning.keeps_repacked_copy(cpu)
    assert not planning.keeps_repacked_copy(dataclasses.replace(cpu, gpu_offload=True, backends=("CUDA", "CPU")))
    assert not planning.keeps_repacked_copy(None)

    def server_built_for(backend: str | None) -> LlamaBuild:
        """The build the plan reads for server-tiny when its llama-server was built for ``backend`` (None: no
        record of it beside the binary, as for one from elsewhere)."""
        binary = tmp_path / str(backend) / "llama-server"
        binary.parent.mkdir()
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
        if backend is not None:
            (binary.parent / RECORD).write_text(f'{{"backend": "{backend}"}}')
        monkeypatch.setenv(ENV, str(binary))
        return planning.build_of(server)

    assert not planning.keeps_repacked_copy(server_built_for(None))  # no record of where it was built
    assert planning.keeps_repacked_copy(server_built_for("cpu"))
    assert not planning.keeps_repacked_copy(server_built_for("cuda"))
    monkeypatch.setattr(planning, "cpu_repacks_weights", lambda: False)
    assert not planning.keeps_repacked_copy(cpu)


def test_check_command_passes_for_the_bundled_pair_and_names_failing_rules(tmp_path, target_path):
    ok = cli("profiles", "check", "tiny")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "✓ compatible" in ok.stdout and "KV @ 4096" in ok.stdout and "0.09 GB" in ok.stdout
    other = write_vocab_gguf(target_path, tmp_path / "other.gguf", [f"t{i}" for i in range(300)],
                             **{"tokenizer.ggml.add_eos_token": True, "tokenizer.ggml.eos_token_id": 7})
    path = tmp_path / "bad.toml"
    path.write_text(f'[target]\nmodel = "{target_path}"\n[draft]\nmethod = "draft"\nmodel = "{other}"\n')
    bad = cli("profiles", "check", str(path))
    assert bad.returncode == 1
    assert "✗ EOS differs (target add_eos=False id=2, draft add_eos=True id=7)" in bad.stdout
    assert "✗ vocabulary sizes differ by 48852 > 128 (target 49152, draft 300)" in bad.stdout
    absent = cli("profiles", "check", "qwen3-8b-1.7b", "--vram-gb", "12")
    assert "expected_size_gb" in absent.stdout and "lower bound" in absent.stdout and "not found" in absent.stdout


def test_drafts_lists_compatible_first_and_says_why_others_fail(tmp_path, monkeypatch, target_path, draft_path):
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    shutil.copy(draft_path, shelf / "smol-draft-copy.gguf")
    write_vocab_gguf(target_path, shelf / "stranger.gguf", [f"t{i}" for i in range(300)])
    (shelf / "bigger.gguf").symlink_to(target_path)  # same size as the target: not a draft candidate
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(shelf))
    out = cli("profiles", "drafts", "tiny", env={"SPECCHAT_MODEL_DIRS": str(shelf)}).stdout
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert [line.split()[1] for line in lines] == ["SmolLM2-135M-Instruct.Q2_K.gguf", "smol-draft-copy.gguf", "stranger.gguf"]
    assert lines[0].lstrip().startswith("✓") and lines[1].lstrip().startswith("✓")
    assert lines[2].lstrip().startswith("✗") and "vocabulary sizes differ" in lines[2]
    assert "bigger.gguf" not in out


def test_set_keeps_comments_and_copies_bundled_presets_to_the_user_dir(tmp_path):
    result = cli("profiles", "set", "tiny", "draft.n_max", "6", env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert result.returncode == 0, result.stderr
    user_copy = tmp_path / "config" / "specchat" / "profiles" / "tiny.toml"
    text = user_copy.read_text()
    original = (profiles.bundled_dir() / "tiny.toml").read_text()
    assert text == original.replace("n_max = 4 ", "n_max = 6 ")  # only the value changed, comments and layout kept
    assert profiles.load_profile("tiny").values["draft"]["n_max"] == 6  # the user copy overrides the bundled preset
    assert cli("profiles", "set", "tiny", "draft.n_max", '"auto"').returncode == 0
    assert profiles.load_profile("tiny").values["draft"]["n_max"] == "auto"
    refused = cli("profiles", "set", "tiny", "draft.n_max", "-3")
    assert refused.returncode == 2 and "n_max: got -3" in refused.stderr
    assert profiles.load_profile("tiny").values["draft"]["n_max"] == "auto"  # an invalid edit is not written
    unknown = cli("profiles", "set", "tiny", "draft.nmax", "3")
    assert unknown.returncode == 2 and "unknown key" in unknown.stderr


# -- hot switching -----------------------------------------------------------------------------------------------------


def test_parameter_change_keeps_everything_loaded(make_engine):
    engine = make_engine("draft", n_max=4)
    run(engine, "Name a fruit.", max_tokens=16)
    target, ctx, draft_model, cached = engine.target, engine.ctx, engine.draft_model, list(engine.ctx.cached)
    for change in (dict(n_max=2, p_min=0.2), dict(method="ngram"), dict(method="none"), dict(method="draft", n_max="auto")):
        config = dataclasses.replace(engine.config, spec=dataclasses.replace(engine.config.spec, **change))
        assert engine.apply(config) == "parameters"
        assert engine.target is target and engine.ctx is ctx and engine.ctx.cached == cached
        assert engine.draft_model is draft_model  # kept while the configuration still names it
    r = run(engine, "And a vegetable?", max_tokens=16)
    assert r.started.reused_tokens == len(cached)


def test_a_thread_change_prices_steps_for_the_new_count(make_engine, tmp_path):
    """Costs are measured per thread count and kept in the user cache: after a switch that only changes threads, what
    is looked up (the depth slope that "vs plain" uses) is the new count's, never stored under the old one's."""
    import json

    from specchat import paths
    from specchat.engine.draft_length import costs

    engine = make_engine("ngram", n_max=4, threads=2)  # (from two, on however many cores this worker has)
    config = dataclasses.replace(engine.config, target=dataclasses.replace(engine.config.target, threads=1))
    assert engine.config.target.threads != 1 and engine.apply(config) == "parameters"
    assert engine.plain_reference(tokens=8) is not None
    kept = paths.verify_costs_file()
    # Kept in the user cache, or for this process only where other processes kept the cores busy meanwhile (#47).
    keys = [*(json.loads(kept.read_text()) if kept.is_file() else {}), *costs.busy_timings()]
    assert any("threads=1|" in k and k.endswith("depth slope") for k in keys), sorted(keys)


def test_new_draft_reloads_only_the_draft(make_engine, draft_path, tmp_path):
    engine = make_engine("draft", n_max=4)
    run(engine, "Name a fruit.", max_tokens=16)
    target, ctx, old_draft = engine.target, engine.ctx, engine.draft_model
    copy = tmp_path / "draft-copy.gguf"
    shutil.copy(draft_path, copy)
    config = dataclasses.replace(engine.config, draft=ModelSettings(copy, threads=THREADS))
    assert engine.apply(config) == "draft reloaded"
    assert engine.target is target and engine.ctx is ctx and engine.draft_model is not old_draft
    assert engine.draft_model.path == copy
    assert run(engine, "And a vegetable?", max_tokens=16).finished.stats.drafted > 0


def test_new_target_reloads_both_and_keeps_the_conversation(make_engine):
    engine = make_engine("draft", n_max=4)
    first = run(engine, "Name a fruit.", max_tokens=16)
    old_target = engine.target
    config = dataclasses.replace(engine.config, n_ctx=1024)
    assert engine.apply(config) == "full reload"
    assert engine.target is not old_target and engine.ctx.n_ctx == 1024
    assert [m.content for m in engine.messages][-1] == first.finished.text
    second = run(engine, "And a vegetable?", max_tokens=16)
    assert second.started.reused_tokens == 0 and second.finished.stats.generated > 0


def test_failed_switch_keeps_the_previous_profile(make_engine, target_path, tmp_path):
    engine = make_engine("draft", n_max=4)
    before = engine.config
    stranger = write_vocab_gguf(target_path, tmp_path / "stranger.gguf", [f"t{i}" for i in range(300)])
    with pytest.raises(IncompatibleDraftError):
        engine.apply(dataclasses.replace(before, draft=ModelSettings(stranger)))
    with pytest.raises(ModelError):
        engine.apply(dataclasses.replace(before, target=ModelSettings(tmp_path / "missing.gguf")))
    assert engine.config is before
    assert run(engine, "Still there?", max_tokens=8).finished.stats.drafted > 0


# -- adaptive draft length ------------------------------------------------------------------------------------------------

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n"


@pytest.fixture(scope="module")
def scrambled_draft(tmp_path_factory, target_path) -> Path:
    return write_scrambled_copy(target_path, tmp_path_factory.mktemp("scrambled") / "scrambled.gguf")


def test_auto_never_drafts_with_a_draft_as_costly_as_the_target(target_path, scrambled_draft):
    """On a CPU a draft model as large as the target costs as much per token as the target saves: even a draft that
    is always right could not win, so "auto" decodes plainly from the first step and says why."""
    from specchat.engine import Engine

    engine = Engine(EngineConfig(ModelSettings(target_path, threads=THREADS), ModelSettings(scrambled_draft, threads=THREADS),
                                 SpecConfig("draft", n_max="auto"), n_ctx=2048))
    try:
        r = run(engine, "Write a long story about dragons.", max_tokens=60)
    finally:
        engine.close()
    stats = r.finished.stats
    assert stats.drafted == 0 and stats.steps > 30
    assert not stats.speculation_active and "even a perfect draft could not win" in stats.speculation_reason
