"""Replay agreement: whether a replayed cell shows what the person saw, and if not, why.

:func:`agreement` compares the outputs recorded in a log or notebook with the outputs of replaying the
same cell. Both are rendered as the text a person reads (:func:`themisto_env.sandbox.rendering.render_outputs`:
streams, ``text/plain`` of results and displays, ``ENAME: evalue`` of errors; tracebacks and images are
not part of it), then normalised by :func:`normalize_output`, and the two texts must be equal. With
``raw=True`` the rendered texts are compared as they are.

Normalisation (version :data:`NORMALIZATION_VERSION`), in this order:

1. Everything :func:`themisto_env.sandbox.rendering.normalize_for_comparison` does: ANSI codes removed;
   ``%time``/``%timeit`` lines, tqdm's elapsed times and rates, durations (``1.23 s``, ``3ms``) made
   placeholders; memory addresses (``<function f at 0x7f3a1c2b4d50>`` -> ``0x<ADDR>``); temporary
   paths (``/tmp/...``, ``/var/folders/...``) -> ``<TMPPATH>``; labelled process ids; trailing whitespace
   of every line and blank lines at both ends removed.
2. Cell file names, old and new: IPython 7's ``<ipython-input-12-3f2a9c0b1d4e>``, ipykernel 6's
   ``/tmp/ipykernel_4711/2519893127.py`` (a recording's), the process-free ``/tmp/ipykernel/2519893127.py``
   this package's kernels use (:func:`themisto_env.sandbox.kernel_helper.stable_cell_names`), or bare
   ``2519893127.py`` (as in ``invalid syntax
   (2519893127.py, line 1)``) -> ``<CELL>``.
3. Figure sizes: ``<Figure size 432x288 with 1 Axes>`` (the old inline backend's default) and
   ``<Figure size 640x480 with 1 Axes>`` -> ``<Figure size <SIZE> with 1 Axes>``; ``Figure(640x480)``
   -> ``Figure(<SIZE>)``. The number of axes is kept.

Numbers in data, exception messages, shapes and paths outside temporary folders are compared as is.

Kinds (:data:`AgreementKind`), the first that applies:

``ok``
    The normalised texts are equal.
``unrecorded``
    Nothing was recorded to compare with (a JuNE execution that never finished, a notebook whose
    outputs were cleared). Not a disagreement; left out of agreement figures.
``missing-module``
    The replay raised ``ModuleNotFoundError`` (or ``ImportError: No module named ...``) and the
    recording did not: the replay's environment lacks a package. E.g. recorded ``<seaborn...>``,
    replayed ``ModuleNotFoundError: No module named 'seaborn'``.
``missing-attribute``
    The replay raised ``AttributeError`` or ``ImportError: cannot import name ...`` and the recording
    did not: usually an API removed since (``'DataFrame' object has no attribute 'append'``).
``missing-file``
    The replay raised ``FileNotFoundError`` (or an error saying ``No such file or directory`` /
    ``does not exist``) and the recording did not: the cell reads a file the replay does not have.
``error-vs-ok``
    One of the two raised and the other did not (any other error, e.g. a ``NameError`` left by an
    earlier failure), or both raised different errors.
``display``
    Streams, errors and results agree; only display outputs differ (images, HTML, figures,
    ``<IPython.core.display.HTML object>`` placeholders, a display present in one only).
``nondeterminism``
    The same outputs in the same places, differing only in numbers: unseeded random draws, timings or
    addresses that survived normalisation, ids. A heuristic (every number replaced by ``<N>``, the
    texts are then equal; version numbers such as ``1.5.3`` must be the same); no cell is replayed
    twice. It cannot tell a number that differs because a package computes it otherwise today (or a
    list sorted another way, or a cell run in another state) from a random one: such differences are
    counted here too.
``other``
    Anything else (a different value, a changed repr, a warning on stderr in one only).

Each verdict has a short ``detail``: the replay's error, or the first differing line of each side.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from themisto_env.sandbox.rendering import normalize_for_comparison, render_outputs

NORMALIZATION_VERSION = 2
"""Version of the normalisation rules (1: :func:`~themisto_env.sandbox.rendering.normalize_for_comparison`
alone; 2: cell file names and figure sizes too, and kinds). Datasets record the version they used."""

AgreementKind = Literal[
    "ok",
    "unrecorded",
    "missing-module",
    "missing-attribute",
    "missing-file",
    "error-vs-ok",
    "display",
    "nondeterminism",
    "other",
]
KINDS: tuple[AgreementKind, ...] = get_args(AgreementKind)
DISAGREEMENTS: frozenset[str] = frozenset(KINDS) - {"ok", "unrecorded"}
"""The kinds that mean the replay shows something else than the person saw."""

_DETAIL_LIMIT = 120

_CELL_FILE_RE = re.compile(
    r"<ipython-input-\d+-[0-9a-f]+>"
    r"|(?:/private)?(?:/var)?/tmp/ipykernel(?:_\d+)?/\d+\.py"
    r"|(?<![\w/.])\d{6,}\.py\b"
)
_FIGURE_RE = re.compile(r"<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)?")
_FIGURE_CALL_RE = re.compile(r"\bFigure\(\d+(?:\.\d+)?x\d+(?:\.\d+)?\)")
_VERSION_RE = re.compile(r"\b\d+\.\d+\.\d+(?:[.\w+-]*)")
_NUMBER_RE = re.compile(r"[-+]?(?:0x[0-9a-fA-F]+|\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")


@dataclass(frozen=True)
class Agreement:
    """A verdict on one replayed cell.

    Attributes:
        agrees: Whether the replay shows what was recorded (after normalisation unless raw).
        kind: Why not (see the module doc); ``ok`` when it agrees.
        detail: A short explanation: the replay's error, or the first differing lines; "" when ok.
    """

    agrees: bool
    kind: AgreementKind
    detail: str = ""


def normalize_output(text: str) -> str:
    """Normalise rendered output text for comparison (rules in the module doc).

    Args:
        text: Rendered outputs (:func:`themisto_env.sandbox.rendering.render_outputs`).

    Returns:
        The text with what legitimately varies between runs replaced by placeholders.

    Example:
        >>> normalize_output("<Figure size 432x288 with 1 Axes>  \\n")
        '<Figure size <SIZE> with 1 Axes>'
    """
    text = _CELL_FILE_RE.sub("<CELL>", text)  # before the temporary-path rule would hide ipykernel's
    text = normalize_for_comparison(text)
    text = _CELL_FILE_RE.sub("<CELL>", text)
    text = _FIGURE_RE.sub("<Figure size <SIZE>", text)
    return _FIGURE_CALL_RE.sub("Figure(<SIZE>)", text)


def normalize_outputs(outputs: Iterable[Mapping[str, Any]]) -> str:
    """Render nbformat outputs and normalise the text (what :func:`agreement` compares)."""
    return normalize_output(render_outputs(outputs))


def agreement(
    recorded: Sequence[Mapping[str, Any]] | None,
    replayed: Sequence[Mapping[str, Any]],
    *,
    raw: bool = False,
) -> Agreement:
    """Compare a cell's recorded outputs with its replayed ones and classify a difference.

    Args:
        recorded: The outputs the person saw; None when nothing was recorded.
        replayed: The outputs of the replay.
        raw: Compare the rendered texts without normalisation.

    Returns:
        The verdict.
    """
    if recorded is None:
        return Agreement(False, "unrecorded", "no recorded outputs to compare with")
    seen, got = render_outputs(recorded), render_outputs(replayed)
    if seen == got:  # equal texts stay equal under normalisation (most steps: no regex run)
        return Agreement(True, "ok")
    prepare = (lambda text: text) if raw else normalize_output
    seen, got = prepare(seen), prepare(got)
    if seen == got:
        return Agreement(True, "ok")
    return _classify(recorded, replayed, seen, got, prepare)


def _error(outputs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((o for o in outputs if o.get("output_type") == "error"), None)


def _error_text(error: Mapping[str, Any]) -> str:
    return render_outputs([error])


def _error_kind(error: Mapping[str, Any]) -> AgreementKind | None:
    name, value = str(error.get("ename") or ""), str(error.get("evalue") or "")
    if name == "ModuleNotFoundError" or (name == "ImportError" and "No module named" in value):
        return "missing-module"
    if name == "AttributeError" or (name == "ImportError" and "cannot import name" in value):
        return "missing-attribute"
    if name == "FileNotFoundError" or "No such file or directory" in value or "does not exist" in value:
        return "missing-file"
    return None


def _short(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


def _first_difference(seen: str, got: str) -> str:
    a, b = seen.split("\n"), got.split("\n")
    for line_a, line_b in zip(a, b, strict=False):
        if line_a != line_b:
            return _short(f"recorded {line_a[:50]!r}, replayed {line_b[:50]!r}")
    if len(a) != len(b):
        extra, side = (a[len(b)], "recorded") if len(a) > len(b) else (b[len(a)], "replayed")
        return _short(f"only {side} has {extra[:60]!r}")
    return ""


def _without_displays(outputs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in outputs if o.get("output_type") != "display_data"]


def _structure(outputs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(str(o.get("output_type")), str(o.get("name", ""))) for o in outputs]


def _numbers_only(seen: str, got: str) -> bool:
    """Whether two texts differ in numbers only (version numbers such as ``1.5.3`` are not numbers)."""
    if _VERSION_RE.findall(seen) != _VERSION_RE.findall(got):
        return False
    return _NUMBER_RE.sub("<N>", seen) == _NUMBER_RE.sub("<N>", got)


def _classify(
    recorded: Sequence[Mapping[str, Any]],
    replayed: Sequence[Mapping[str, Any]],
    seen: str,
    got: str,
    prepare: Any,
) -> Agreement:
    recorded_error, replayed_error = _error(recorded), _error(replayed)
    if replayed_error is not None and (
        recorded_error is None or _error_text(recorded_error) != _error_text(replayed_error)
    ):
        kind = _error_kind(replayed_error)
        if kind is not None and (recorded_error is None or _error_kind(recorded_error) != kind):
            return Agreement(False, kind, _short(f"replay raised {_error_text(replayed_error)}"))
        if recorded_error is None:
            return Agreement(False, "error-vs-ok", _short(f"replay raised {_error_text(replayed_error)}"))
        return Agreement(
            False,
            "error-vs-ok",
            _short(f"recorded {_error_text(recorded_error)}; replay raised {_error_text(replayed_error)}"),
        )
    if recorded_error is not None and replayed_error is None:
        return Agreement(False, "error-vs-ok", _short(f"recorded {_error_text(recorded_error)}; replay ran"))
    if prepare(render_outputs(_without_displays(recorded))) == prepare(render_outputs(_without_displays(replayed))):
        return Agreement(False, "display", _first_difference(seen, got) or "display outputs differ")
    if _structure(recorded) == _structure(replayed) and _numbers_only(seen, got):
        return Agreement(False, "nondeterminism", _first_difference(seen, got))
    return Agreement(False, "other", _first_difference(seen, got))


__all__ = [
    "DISAGREEMENTS",
    "KINDS",
    "NORMALIZATION_VERSION",
    "Agreement",
    "AgreementKind",
    "agreement",
    "normalize_output",
    "normalize_outputs",
]
