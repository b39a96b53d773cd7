"""The one exception tree of themisto-env: every error it raises on purpose is a ``ThemistoError``.

Two branches matter most to a caller: an ``InfrastructureError`` is the machinery's failure (a kernel
died, a backend is missing), never scored as a wrong answer; a ``ModelError`` is a model call that still
failed after its retries. Warnings given on purpose are ``ThemistoWarning``s (``PrebuildWarning``: a kernel
template could not prebuild). The whole tree is drawn in the API reference (docs/reference/errors.md).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


class ThemistoError(Exception):
    """Base class of every error raised by themisto-env on purpose."""


class ConfigError(ThemistoError):
    """An experiment config or option is invalid.

    Args:
        message: One line naming the option.
        errors: Pydantic's validation errors behind it, where there were some (``ValidationError.errors()``):
            a caller that names the options its own way (a config file's path, ``env.``) formats them again
            with `options_error`.
    """

    def __init__(self, message: str, *, errors: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.errors = list(errors)


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


def import_extra(module: str, extra: str, *, name: str | None = None) -> ModuleType:
    """Import ``module`` of an optional extra, or raise a ProviderError naming it (``name``, default the
    module) and the extra that installs it, in one line."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ProviderError(f"{name or module} is not installed ({exc}): pip install 'themisto-env[{extra}]'") from None


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


class ThemistoWarning(UserWarning):
    """A warning this package gives on purpose: something works, but not as it should."""


class PrebuildWarning(ThemistoWarning):
    """A kernel template could not build the kernel application before forking (an upgrade of ipykernel or
    IPython, a kernel class or config of the user's): each copy builds its own after the fork, slower."""


def did_you_mean(word: object, choices: Iterable[str], *, cutoff: float = 0.5, listed: bool = True) -> str:
    """The one "did you mean" of every entry point: ``"; did you mean 'tools'?"`` for the choice nearest to
    ``word`` (difflib), else ``"; valid: a, b, c"`` (every choice), else ``""`` (no choices).

    Args:
        word: What was given (a name, a value; anything else is shown as its repr).
        choices: The valid names or values.
        cutoff: difflib's similarity cutoff, in [0, 1].
        listed: List the choices when none is near (False: the caller's message lists them).
    """
    options = [str(choice) for choice in choices]
    near = difflib.get_close_matches(str(word), options, n=1, cutoff=cutoff)
    if near:
        return f"; did you mean {near[0]!r}?"
    return f"; valid: {', '.join(options)}" if options and listed else ""


def options_error(errors: Sequence[Mapping[str, Any]], model: Any, *, prefix: str = "") -> str:
    """Pydantic's validation errors of an options model as one line: each bad option named, with the
    nearest valid name (an unknown option) or value (a choice); ``env.histroy_length: no such option; did
    you mean 'history_length'?``.

    Args:
        errors: ``ValidationError.errors()``.
        model: The model class validated (its ``model_fields``, nested models' too, are the valid names).
        prefix: Put before each option's name (``env.`` for a run config's ``env:`` block).
    """
    problems = []
    for error in errors:
        loc = [str(part)[:64] for part in error.get("loc", ())]
        name = prefix + ".".join(loc) if loc else prefix.rstrip(".") or "options"
        given = error.get("input")
        shown = repr(given) if len(repr(given)) <= 80 else repr(given)[:77] + "..."
        if error.get("type") in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's, a dataclass's
            problems.append(f"{name}: no such option" + did_you_mean(loc[-1] if loc else "", _fields(model, loc[:-1])))
        elif error.get("type") in ("literal_error", "enum"):
            expected = str((error.get("ctx") or {}).get("expected", ""))
            choices = [part.strip(" '\"") for part in expected.replace(" or ", ", ").split(",") if part.strip()]
            problems.append(
                f"{name}: {shown} is not one of {', '.join(choices)}" + did_you_mean(str(given)[:64], choices)
            )
        elif error.get("type") == "value_error":  # a validator's own message says what was given
            message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
            problems.append(f"{name}: {message}" if loc else message)
        else:
            problems.append(f"{name}: {error.get('msg', 'invalid')} (got {shown})")
    return "; ".join(" ".join(problem.split()) for problem in problems)


def _fields(model: Any, path: Sequence[str]) -> list[str]:
    """The option names of ``model`` at ``path`` (a nested model's or dataclass's: its fields, and the names a
    model takes beside them, its ``flat_options``), or none when the path leaves the models."""
    for part in path:
        field = getattr(model, "model_fields", {}).get(part)
        model = getattr(field, "annotation", None)
        if model is None:
            return []
    if dataclasses.is_dataclass(model):
        return [field.name for field in dataclasses.fields(model)]
    return [*getattr(model, "model_fields", {}), *getattr(model, "flat_options", ())]


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
    "PrebuildWarning",
    "ProviderError",
    "ReplayDivergedError",
    "SnapshotCorruptError",
    "SnapshotEnvironmentError",
    "SnapshotError",
    "SplitError",
    "ThemistoError",
    "ThemistoWarning",
    "UnknownNameError",
    "did_you_mean",
    "import_extra",
    "options_error",
]
