"""Live telemetry from events, memory probes (NVML at its boundary), and the versioned SQLite store."""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import types

import pytest

from recorded import load
from specchat.engine.events import ReplyFinished, StepVerified, TokenEmitted
from specchat.chats.store import SCHEMA_VERSION, DamagedDatabase, Store, StoreError
from specchat.chats.store_rows import StoredMessage
from specchat.chats.store_opening import open_store
from specchat.telemetry import memory
from specchat.engine.reference import PlainReference
from specchat.telemetry.live import LiveTelemetry


def test_live_telemetry_agrees_with_the_engine_summary():
    _prompt, events = load()
    live = LiveTelemetry()
    live.consume(events)
    stats = next(e for e in events if isinstance(e, ReplyFinished)).stats
    assert (live.reply.drafted, live.reply.accepted) == (stats.drafted, stats.accepted)
    assert live.reply.acceptance_rate == pytest.approx(stats.acceptance_rate)
    assert live.reply.mean_acceptance_length == pytest.approx(stats.mean_acceptance_length)
    assert live.reply.position_rates == stats.position_rates
    assert live.reply_tokens == stats.generated and not live.generating
    assert len(live.spark) == sum(1 for e in events if isinstance(e, StepVerified) and e.drafted)
    live.reference = PlainReference.measured(stats.decode_tps / 2, 0, 0.0, False, "test")  # flat over depth
    assert live.speedup() == pytest.approx(2.0)


def test_tokens_per_second_now_uses_the_last_second():
    live = LiveTelemetry()
    _prompt, events = load()
    live.consume([events[0]])  # ReplyStarted
    tokens = [e for e in events if isinstance(e, TokenEmitted)]
    for i, token in enumerate(tokens[:30]):
        live.consume([dataclasses.replace(token, elapsed=0.1 + i * 0.02)])  # 50 tokens per second
    assert live.tps_now() == pytest.approx(50.0)
    assert live.reply_rate() == pytest.approx(50.0)


def nvidia_driver_present() -> bool:
    """Independent of specchat's probe: the kernel driver exposes its version here when an NVIDIA GPU is usable."""
    import os

    return os.path.exists("/proc/driver/nvidia/version")


def test_gpu_memory_through_the_real_nvml_or_the_reason_it_is_missing():
    result = memory.gpu_memory()
    if nvidia_driver_present():
        assert isinstance(result, memory.GpuMemory), result
        assert 0 < result.used <= result.total and result.name
    else:
        assert isinstance(result, memory.GpuUnavailable) and result.reason


def test_rates_need_a_window_long_enough_to_mean_something():
    """The tokens of one verify step arrive within microseconds: a rate over them alone measured 116547 tok/s."""
    live = LiveTelemetry()
    _prompt, events = load()
    live.consume([events[0]])  # ReplyStarted
    token = next(e for e in events if isinstance(e, TokenEmitted))
    live.consume([dataclasses.replace(token, elapsed=1.0 + i * 1e-5) for i in range(8)])
    assert live.tps_now() is None and live.reply_rate() is None and live.speedup() is None
    live.reference = PlainReference.measured(120.0, 0, 0.0, False, "test")
    assert live.speedup() is None  # one side cannot be measured: no ratio, "–" on screen


def test_gpu_memory_reads_nvml(monkeypatch):
    """NVML is the one boundary without a GPU here: a stand-in module checks how its answers are read."""

    class NVMLError(Exception):
        pass

    proc = types.SimpleNamespace(pid=4242, usedGpuMemory=3_000_000_000)
    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_LibraryNotFound=type("NotFound", (NVMLError,), {}),
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: "gpu0",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=5_000_000_000, total=12_000_000_000),
        nvmlDeviceGetName=lambda h: b"NVIDIA GeForce RTX 4070",
        nvmlDeviceGetComputeRunningProcesses=lambda h: [proc],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    result = memory.gpu_memory(pid=4242)
    assert result == memory.GpuMemory("NVIDIA GeForce RTX 4070", 5_000_000_000, 12_000_000_000, 3_000_000_000)
    assert memory.gpu_memory(pid=1).process is None


def test_peak_rss_resets():
    assert memory.reset_peak_rss()
    before = memory.peak_rss_bytes()
    blob = bytearray(200_000_000)
    assert memory.peak_rss_bytes() >= before + 150_000_000
    del blob
    memory.reset_peak_rss()
    assert memory.peak_rss_bytes() < before + 150_000_000


def test_store_schema_is_versioned_and_round_trips(tmp_path):
    path = tmp_path / "chats.sqlite3"
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    chat = store.create("first", "tiny", "Be brief.")
    store.append(chat, StoredMessage("user", "hi"))
    reply = StoredMessage("assistant", "Hello!", [1, 2], [("Hello", "accepted"), ("!", "corrected")], [(0, " there")],
                          "stop", {"drafted": 3})
    store.append(chat, reply)
    store.close()
    reopened = Store(path)  # migrations are idempotent
    assert reopened.messages(chat)[1] == reply
    assert reopened.get(chat).system_prompt == "Be brief."
    reopened.rename(chat, "renamed")
    reopened.replace_tail(chat, 1, [])
    assert [m.role for m in reopened.messages(chat)] == ["user"] and reopened.conversations()[0].title == "renamed"
    reopened.delete(chat)
    assert reopened.conversations() == []


def test_store_refuses_a_newer_schema_and_a_damaged_file(tmp_path):
    newer = tmp_path / "newer.sqlite3"
    db = sqlite3.connect(newer)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer than this specchat"):
        Store(newer)
    store, problem = open_store(newer)  # not damaged: left as it is, the chat runs in memory
    assert store is None and "newer than this specchat" in problem and "chatting in memory" in problem
    assert [p.name for p in tmp_path.iterdir()] == ["newer.sqlite3"]
    corrupt = tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(b"garbage" * 1000)
    with pytest.raises(DamagedDatabase, match="not a database"):
        Store(corrupt)
