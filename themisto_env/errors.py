"""The one exception tree of themisto-env.

Every error this package raises on purpose is a ``ThemistoError``::

    ThemistoError
    ├── ConfigError              a config file or option is invalid (names the key)
    │   └── SplitError               a sample or trajectory of the other side of a split was asked for
    ├── DataError                a data file is malformed (names the file, row and field)
    ├── ActionError              an agent's action is malformed (answered in the observation, never raised
    │                            out of ``Env.step``)
    ├── ProviderError            an optional LLM provider package or key is missing (says what to install)
    ├── ModelError               a model call still failed after its retries (rate limit, 5xx, timeout) or
    │                            cannot succeed (400, 401, malformed reply): the sample is recorded as
    │                            ``model_error``, neither scored nor an infrastructure failure
    ├── HelperError              the in-kernel helper failed on the user's data (a broken ``__repr__``, ...):
    │   │                        the kernel is healthy; tools answer it as text
    │   └── IntrospectionRefused     the helper declined: not the kind of variable asked for (``dataframe`` of a
    │       │                        list, ``source`` of an object without one)
    │       └── UnknownNameError         no user variable has that name (carries the nearest names)
    └── InfrastructureError      the machinery failed, not the model: never scored as a wrong answer
        ├── BackendUnavailableError  the backend cannot run here (no Docker engine, no image, ...)
        ├── KernelStartError         a kernel did not become ready
        ├── TemplateGoneError        a kernel template's process is gone: nothing can be forked from it
        ├── KernelDiedError          the kernel process died (segfault, os._exit, OOM kill, lost container)
        ├── KernelTimeoutError       the kernel stopped answering and could not be recovered
        ├── SnapshotError            a snapshot could not be written or restored
        │   ├── SnapshotCorruptError     a snapshot's bytes do not hash to its name (set aside, never loaded)
        │   └── SnapshotEnvironmentError a snapshot was written in another kernel environment (never loaded)
        └── ReplayDivergedError      a replayed cell ended otherwise than recorded (timeout, restart, error)
"""

from __future__ import annotations

from pathlib import Path


class ThemistoError(Exception):
    """Base class of every error raised by themisto-env on purpose."""


class ConfigError(ThemistoError):
    """An experiment config or option is invalid."""


class SplitError(ConfigError):
    """A sample or trajectory of the other side of a split was asked for (a train view serves only train)."""


class DataError(ThemistoError):
    """A data file is malformed. The message names the file, and the row and field where known."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.row = row
        self.field = field
        where = []
        if self.path is not None:
            where.append(self.path)
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ActionError(ThemistoError):
    """An agent's action is malformed; the env answers it in the observation."""


class ProviderError(ThemistoError):
    """An optional provider (LLM package, API key) is missing; the message says what to install or set."""


class ModelError(ThemistoError):
    """A model call failed: retries exhausted, or an error retrying cannot mend. One line.

    Attributes:
        status: The HTTP status, when the provider answered with one.
        attempts: How many times the call was made.
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        self.status = status
        self.attempts = attempts
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:  # crosses processes (workers, Ray) with its fields
        return type(self), (str(self),), self.__dict__


class HelperError(ThemistoError):
    """The in-kernel helper raised on the user's data; the kernel itself is fine.

    Attributes:
        function: The helper function that was called.
        detail: The exception it raised, as ``Type: message``.
    """

    def __init__(self, function: str, detail: str) -> None:
        self.function = function
        self.detail = detail
        super().__init__(f"kernel helper {function!r} raised {detail}")

    def __reduce__(self) -> tuple[object, ...]:  # crosses processes (Ray) with its fields
        return type(self), (self.function, self.detail), self.__dict__


class IntrospectionRefused(HelperError):
    """The helper declined to answer: the variable is not of the kind asked for (``dataframe`` of a list,
    ``source`` of an object without one, an unknown view). The kernel is fine; tools answer it as text.

    Attributes:
        function: The helper function that was called.
        detail: Why, as a sentence for the agent (also ``str(error)``).
        name: The variable asked about, if any.
    """

    def __init__(self, function: str, detail: str, *, name: str | None = None) -> None:
        super().__init__(function, detail)
        self.name = name

    def __str__(self) -> str:
        return self.detail


class UnknownNameError(IntrospectionRefused):
    """No user variable has the name asked about; ``detail`` names the nearest ones ("Did you mean ...?").

    Attributes:
        suggestions: The nearest user names, closest first (possibly none).
    """

    def __init__(
        self, function: str, detail: str, *, name: str | None = None, suggestions: tuple[str, ...] = ()
    ) -> None:
        super().__init__(function, detail, name=name)
        self.suggestions = tuple(suggestions)


class InfrastructureError(ThemistoError):
    """The infrastructure failed (not the model). Never scored as a wrong answer."""


class BackendUnavailableError(InfrastructureError):
    """The requested kernel backend cannot run on this machine."""


class KernelStartError(InfrastructureError):
    """A kernel did not start or did not become ready in time."""


class TemplateGoneError(InfrastructureError):
    """A kernel template's process is gone (killed, crashed): no kernel can be forked from it until replaced."""


class KernelDiedError(InfrastructureError):
    """The kernel process died while it was running or waiting."""


class KernelTimeoutError(InfrastructureError):
    """The kernel did not answer in time and could not be brought back."""


class SnapshotError(InfrastructureError):
    """A snapshot could not be written or restored."""


class SnapshotCorruptError(SnapshotError):
    """A snapshot file's content does not hash to its name: it was changed after it was written."""


class SnapshotEnvironmentError(SnapshotError):
    """A snapshot was written by a kernel of another environment (other packages): it is not restored."""


class ReplayDivergedError(InfrastructureError):
    """A recorded cell, replayed to reach a sample's state, ended otherwise than when it was recorded."""


__all__ = [
    "ActionError",
    "BackendUnavailableError",
    "ConfigError",
    "DataError",
    "HelperError",
    "InfrastructureError",
    "IntrospectionRefused",
    "KernelDiedError",
    "KernelStartError",
    "KernelTimeoutError",
    "ModelError",
    "ProviderError",
    "ReplayDivergedError",
    "SnapshotCorruptError",
    "SnapshotEnvironmentError",
    "SnapshotError",
    "SplitError",
    "ThemistoError",
    "UnknownNameError",
]
