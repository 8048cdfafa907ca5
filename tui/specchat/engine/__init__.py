"""The speculative engine, free of any UI: configure it, feed it messages, consume its events."""

from .engine_config import EngineConfig, ModelSettings, SpecConfig
from .conversation import Message
from .core import Engine
from .events import (
    ContextTrimmed,
    DraftRejected,
    Event,
    ReplyFinished,
    ReplyStarted,
    SpeculationChanged,
    SpeculationState,
    StepVerified,
    ThreadsAdjusted,
    TokenEmitted,
    TokenKind,
)
from .sampling import SamplingParams

__all__ = [
    "ContextTrimmed", "DraftRejected", "Engine", "EngineConfig", "Event", "Message", "ModelSettings", "ReplyFinished",
    "ReplyStarted", "SamplingParams", "SpecConfig", "SpeculationChanged", "SpeculationState", "StepVerified",
    "ThreadsAdjusted", "TokenEmitted", "TokenKind",
]
