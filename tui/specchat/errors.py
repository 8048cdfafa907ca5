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
    """A parameter or profile value is impossible or unknown. ``key``: the profile's (section, key) it is about, for
    the profile parser to name its line."""

    def __init__(self, message: str, key: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.key = key


class ContextError(SpecchatError):
    """The conversation cannot fit in the model's context window."""


class EngineError(SpecchatError):
    """llama.cpp refused an operation the engine relies on."""


class BackendError(SpecchatError):
    """A model server cannot be started, reached or understood."""


class Refused(SpecchatError):
    """What was asked cannot be done now; the line says why and what to do."""


class SwitchFailed(SpecchatError):
    """A switch failed and the previous backend could not stay: ``backend`` is the one open now (the previous one
    opened again), or None when none could be."""

    def __init__(self, message: str, backend: object | None) -> None:
        super().__init__(message)
        self.backend = backend


def one_line(exc: BaseException) -> str:
    """What a front end shows for any exception: specchat's own errors as they are, others named, on one line."""
    text = str(exc) if isinstance(exc, SpecchatError) else f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())
