"""Errors the user can act on.

Every ``SpecchatError`` renders as one line that names the problem and what to do about it; front ends print that
line instead of a traceback.
"""


class SpecchatError(Exception):
    """A problem caused by input or environment, with a one-line explanation and remedy."""


class ModelError(SpecchatError):
    """A model file is missing, unreadable, or unsuitable."""


class IncompatibleDraftError(ModelError):
    """The draft model cannot propose tokens the target understands."""


class ConfigError(SpecchatError):
    """A parameter or profile value is impossible or unknown."""


class ContextError(SpecchatError):
    """The conversation cannot fit in the model's context window."""


class EngineError(SpecchatError):
    """llama.cpp refused an operation the engine relies on."""
