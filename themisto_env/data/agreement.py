"""Replay agreement: whether a replayed cell shows what the person saw, and if not, why.

`agreement` renders the recorded and the replayed outputs as the text a person reads
(`themisto_env.sandbox.rendering.render_outputs`), normalises both (`normalize_output`) and, when they
differ, names the first cause that applies (`AgreementKind`) with a one-line detail. A recording that kept
only each output's kind and size (JuNE as published) is compared at that level. A `ReplayContext` carries
the build's evidence (the replay's status, a second replay, the step an input came from, package versions);
without it fewer causes can be told apart. docs/data.md ("Replay agreement") describes each cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from themisto_env.data.kind_and_size import RecordLevel, describe, output_text, parts, record_level, same_parts
from themisto_env.sandbox.rendering import normalize_for_comparison, render_outputs

NORMALIZATION_VERSION = 5
"""Version of the comparison rules; datasets record the one they used and are compared again when read under
another (5: kind-and-size recordings, numpy 2's scalar reprs, upstream causes that follow the evidence)."""

AgreementKind = Literal[
    "ok",
    "unrecorded",
    "timeout",
    "missing-module",
    "missing-attribute",
    "missing-file",
    "upstream",
    "error-vs-ok",
    "display",
    "warning",
    "timing",
    "nondeterminism",
    "environment",
    "other",
]
"""Why a replay differs, the first that applies in this order (docs/data.md has a table with examples).

- ``ok``: equal after normalisation. ``unrecorded``: nothing recorded to compare with (also a saved
  notebook cell with no outputs whose replay shows something); not a disagreement.
- ``timeout``: cut at the per-cell limit. ``missing-module``, ``missing-attribute``, ``missing-file``: the
  replay alone raised ``ModuleNotFoundError``, ``AttributeError`` / ``cannot import name``, or a missing
  file (a ``!`` command's ``can't open file`` / ``command not found`` too).
- ``upstream``: the cell reads a name an earlier disagreeing step wrote (`UPSTREAM_SOURCES`); a
  ``NameError`` names the step that should have bound it.
- ``error-vs-ok``: one raised and the other did not, or other errors.
- ``display``, ``warning``, ``timing``: only displays, a stderr warning, or numbers on a line about time
  differ (the last two `TOLERATED`).
- ``nondeterminism``: a second replay from the state before differs from the first. ``environment``: only
  numpy 2's scalar reprs differ (this wins over ``upstream``), or a second replay agrees with the first and
  both differ from the recording.
- ``other``: anything else (the cell was not replayed twice).
"""
KINDS: tuple[AgreementKind, ...] = get_args(AgreementKind)
DISAGREEMENTS: frozenset[str] = frozenset(KINDS) - {"ok", "unrecorded"}
"""The kinds that mean the replay shows something else than the person saw."""
TOLERATED: frozenset[str] = frozenset({"timing", "warning"})
"""Disagreements that leave what the person read as it was: a measured duration, a warning on stderr (the
agreement figure counts them apart: agrees / tolerated / disagrees by cause)."""
UPSTREAM_SOURCES: frozenset[str] = DISAGREEMENTS - {"display", "warning"}
"""The kinds of an earlier step whose values a later cell's difference can come from (``upstream``): not a
figure shown otherwise, not a warning, which leave the values the cell made as they were."""

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
_MISSING_FILE_RE = re.compile(r"No such file or directory|can't open file|command not found")
_WARNING_RE = re.compile(r"\b\w*Warning\b")
_NUMPY_SCALAR_RE = re.compile(
    r"\bnp\.(?:u?int(?:8|16|32|64|c|p)?|float(?:16|32|64|96|128)?|complex(?:64|128|192|256)?|longlong|ulonglong"
    r"|half|single|double|longdouble|str_|bytes_)\(((?:[^()]|\([^()]*\))*)\)"
)
_NUMPY_BOOL_RE = re.compile(r"\bnp\.(True|False)_")
_TIMING_RE = re.compile(
    r"\b(?:time[ds]?|timing|elapsed|duration|runtime|latency|seconds?|secs?|ms|minutes?|mins?|hours?"
    r"|wall|cpu|it/s|s/it|per second)\b|\btook\s+\d*\.\d|\d(?:s|ms|us|µs|ns)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Agreement:
    """A verdict on one replayed cell.

    Attributes:
        agrees: Whether the replay shows what was recorded (after normalisation unless raw).
        kind: Why not (`AgreementKind`); ``ok`` when it agrees.
        detail: A short explanation: the replay's error, or the first differing lines; "" when ok.
    """

    agrees: bool
    kind: AgreementKind
    detail: str = ""


def normalize_output(text: str) -> str:
    """Normalise rendered output text for comparison.

    Applies `themisto_env.sandbox.rendering.normalize_for_comparison`, then replaces cell file names (IPython
    7's ``<ipython-input-12-3f2a...>``, ipykernel's ``/tmp/ipykernel_4711/2519893127.py``) by ``<CELL>`` and
    figure sizes (``<Figure size 432x288 ...>``, ``Figure(640x480)``) by ``<SIZE>``.

    Args:
        text: Rendered outputs (`themisto_env.sandbox.rendering.render_outputs`).

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
    """Render nbformat outputs and normalise the text (what `agreement` compares)."""
    return normalize_output(render_outputs(outputs))


@dataclass(frozen=True)
class ReplayContext:
    """What a step's verdict can use beyond its two outputs (all optional: without it, fewer causes).

    Attributes:
        status: The replay's status (``ok``, ``error``, ``timeout``).
        interrupted: The person interrupted the cell (a replay cut at the recorded time is no ``timeout``).
        limit_s: The per-cell limit the replay ran under (named in a ``timeout``'s detail).
        stable: Whether a second replay of the cell, from a copy of the state before it, showed the same
            outputs as the first (None: not replayed twice).
        second: The outputs of that second replay, when they differ (for the detail).
        upstream: The earlier disagreeing step this cell's inputs come from, as a phrase (``step 3
            (missing-file) wrote 'df'``); None if none.
        drift: Packages whose versions differ from the recording's, name -> (recorded, replayed).
        notebook: The recording is a saved notebook (whose cells' outputs can have been cleared).
        level: How much the recording holds (`themisto_env.data.kind_and_size.RecordLevel`); None: read
            from the recorded outputs themselves.
    """

    status: str | None = None
    interrupted: bool = False
    limit_s: float | None = None
    stable: bool | None = None
    second: Sequence[Mapping[str, Any]] | None = None
    upstream: str | None = None
    drift: Mapping[str, Sequence[str]] = field(default_factory=dict)
    notebook: bool = False
    level: RecordLevel | None = None


def numpy_1_reprs(text: str) -> str:
    """Text with numpy 2's scalar reprs written as numpy 1 wrote them (``np.int64(8)`` -> ``8``,
    ``np.True_`` -> ``True``): the commonest repr today's libraries changed."""
    return _NUMPY_BOOL_RE.sub(r"\1", _NUMPY_SCALAR_RE.sub(r"\1", text))


def agreement(
    recorded: Sequence[Mapping[str, Any]] | None,
    replayed: Sequence[Mapping[str, Any]],
    *,
    raw: bool = False,
    context: ReplayContext | None = None,
) -> Agreement:
    """Compare a cell's recorded outputs with its replayed ones and classify a difference.

    Args:
        recorded: The outputs the person saw; None when nothing was recorded.
        replayed: The outputs of the replay.
        raw: Compare the rendered texts without normalisation.
        context: The replay's status, a second replay, the step an input came from, package drift.

    Returns:
        The verdict.
    """
    context = context or ReplayContext()
    if recorded is None:
        return Agreement(False, "unrecorded", "no recorded outputs to compare with")
    if context.notebook and not recorded and _shows_something(replayed):
        return Agreement(False, "unrecorded", "the notebook kept no outputs for this cell (cleared before saving?)")
    if (context.level or record_level(recorded)) == "kind-and-size":
        return _classify_kind_and_size(recorded, replayed, context)
    seen, got = render_outputs(recorded), render_outputs(replayed)
    if seen == got and context.status != "timeout":  # equal texts stay equal under normalisation
        return Agreement(True, "ok")
    prepare = (lambda text: text) if raw else normalize_output
    seen, got = prepare(seen), prepare(got)
    if seen == got and context.status != "timeout":
        return Agreement(True, "ok")
    return _classify(recorded, replayed, seen, got, prepare, context)


def _shows_something(outputs: Sequence[Mapping[str, Any]]) -> bool:
    """A result or printed text, and no error: what a cell saved with no outputs cannot have shown."""
    kinds = {(o.get("output_type"), o.get("name")) for o in outputs}
    return ("error", None) not in kinds and bool(kinds & {("execute_result", None), ("stream", "stdout")})


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


def _is_stderr(output: Mapping[str, Any]) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stderr"


def _without_stderr(outputs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in outputs if not _is_stderr(o)]


def _stderr(outputs: Sequence[Mapping[str, Any]], prepare: Any) -> str:
    return str(prepare(render_outputs([o for o in outputs if _is_stderr(o)])))


def _differing_lines(seen: str, got: str) -> list[str]:
    a, b = seen.split("\n"), got.split("\n")
    if len(a) != len(b):
        return []
    return [f"{x}\n{y}" for x, y in zip(a, b, strict=True) if x != y]


def _timing_only(seen: str, got: str) -> bool:
    """Whether the texts differ only in numbers, on lines that speak of time (``took 0.53``, ``elapsed``)."""
    lines = _differing_lines(seen, got)
    return bool(lines) and _numbers_only(seen, got) and all(_TIMING_RE.search(line) for line in lines)


def _timeout_detail(context: ReplayContext) -> str:
    limit = context.limit_s
    if limit is None:
        return "the replay ran past its per-cell limit and was cut"
    return (
        f"cut at the {limit:g} s per-cell limit; rebuild with a longer one: themisto data build ... "
        f"--cell-timeout {max(2 * limit, 600):g}"
    )


def _classify(
    recorded: Sequence[Mapping[str, Any]],
    replayed: Sequence[Mapping[str, Any]],
    seen: str,
    got: str,
    prepare: Any,
    context: ReplayContext,
) -> Agreement:
    if context.status == "timeout" and not context.interrupted:
        return Agreement(False, "timeout", _timeout_detail(context))
    recorded_error, replayed_error = _error(recorded), _error(replayed)
    errors_differ = (replayed_error is not None or recorded_error is not None) and (
        recorded_error is None or replayed_error is None or _error_text(recorded_error) != _error_text(replayed_error)
    )
    if errors_differ:
        recorded_text = _error_text(recorded_error) if recorded_error is not None else None
        recorded_kind = _error_kind(recorded_error) if recorded_error is not None else None
        return _errors_verdict(recorded_text, recorded_kind, replayed_error, context)
    missing = _MISSING_FILE_RE.search(got)
    if missing and not _MISSING_FILE_RE.search(seen):  # a shell command (``!python x.py``) says it in a stream
        line = got[got.rfind("\n", 0, missing.start()) + 1 :].split("\n", 1)[0]
        return Agreement(False, "missing-file", _short(f"replay printed {line!r}"))
    if prepare(render_outputs(_without_displays(recorded))) == prepare(render_outputs(_without_displays(replayed))):
        return Agreement(False, "display", _first_difference(seen, got) or "display outputs differ")
    if prepare(render_outputs(_without_stderr(recorded))) == prepare(render_outputs(_without_stderr(replayed))):
        recorded_err, replayed_err = _stderr(recorded, prepare), _stderr(replayed, prepare)
        if _WARNING_RE.search(recorded_err) or _WARNING_RE.search(replayed_err):
            return Agreement(False, "warning", _first_difference(recorded_err, replayed_err) or "warnings differ")
    if _structure(recorded) == _structure(replayed) and _timing_only(seen, got):
        return Agreement(False, "timing", _first_difference(seen, got))
    if numpy_1_reprs(got) == seen:
        return Agreement(False, "environment", _short(f"numpy 2's scalar repr: {_first_difference(seen, got)}"))
    again = prepare(render_outputs(context.second or []))
    hint = " (numbers only)" if _structure(recorded) == _structure(replayed) and _numbers_only(seen, got) else ""
    return _by_context(context, _first_difference(seen, got), hint, _first_difference(got, again))


def _errors_verdict(
    recorded: str | None,
    recorded_kind: AgreementKind | None,
    replayed: Mapping[str, Any] | None,
    context: ReplayContext,
) -> Agreement:
    """The verdict when the two sides raised differently (``recorded``: the recorded error as text, None if
    none; ``replayed``: the replay's error output, None if none)."""
    if replayed is not None:
        kind = _error_kind(replayed)
        if kind is not None and (recorded is None or recorded_kind != kind):
            return Agreement(False, kind, _short(f"replay raised {_error_text(replayed)}"))
    if context.upstream:
        return Agreement(False, "upstream", _short(f"inputs from {context.upstream}"))
    if replayed is None:
        return Agreement(False, "error-vs-ok", _short(f"recorded {recorded}; replay ran"))
    if recorded is None:
        return Agreement(False, "error-vs-ok", _short(f"replay raised {_error_text(replayed)}"))
    return Agreement(False, "error-vs-ok", _short(f"recorded {recorded}; replay raised {_error_text(replayed)}"))


def _classify_kind_and_size(
    recorded: Sequence[Mapping[str, Any]], replayed: Sequence[Mapping[str, Any]], context: ReplayContext
) -> Agreement:
    """The verdict on a recording of kinds and sizes only: the same causes as `_classify`, read from the
    replay's text and the recorded kinds, sizes and error names, never from text that was not recorded."""
    if context.status == "timeout" and not context.interrupted:
        return Agreement(False, "timeout", _timeout_detail(context))
    seen, got = parts(recorded), parts(replayed)
    recorded_error = next((p for p in seen if p.kind == "error"), None)
    replayed_error = _error(replayed)
    named = recorded_error is not None and recorded_error.ename is not None
    if (recorded_error is None) != (replayed_error is None) or (
        named and replayed_error is not None and recorded_error.ename != replayed_error.get("ename")
    ):
        ename = recorded_error.ename if recorded_error is not None else None
        text = None if recorded_error is None else (ename or "an error")
        return _errors_verdict(text, _error_kind({"ename": ename}) if ename else None, replayed_error, context)
    if same_parts(seen, got):
        return Agreement(True, "ok")
    shown = render_outputs(replayed)
    if (missing := _MISSING_FILE_RE.search(shown)) is not None:
        line = shown[shown.rfind("\n", 0, missing.start()) + 1 :].split("\n", 1)[0]
        return Agreement(False, "missing-file", _short(f"replay printed {line!r}"))
    difference = f"kind and size: {describe(seen, got)}"
    if same_parts([p for p in seen if p.kind != "display_data"], [p for p in got if p.kind != "display_data"]):
        return Agreement(False, "display", _short(difference))
    warning = _WARNING_RE.search(_stderr(replayed, normalize_output))
    kept = [o for o in replayed if not _is_stderr(o)]
    if warning and (same_parts(seen, parts(kept)) or _streams_only_differ(seen, got)):
        return Agreement(False, "warning", _short(f"the replay warns ({difference})"))
    if same_parts(seen, parts(_rewritten(replayed, numpy_1_reprs))):
        return Agreement(False, "environment", _short(f"numpy 2's scalar repr ({difference})"))
    second = render_outputs(context.second or [])
    return _by_context(context, difference, "", _first_difference(normalize_output(shown), normalize_output(second)))


def _streams_only_differ(seen: Sequence[Any], got: Sequence[Any]) -> bool:
    """The same kinds in order, and only streams differ in size (where a warning's text can differ)."""
    return [p.kind for p in seen] == [p.kind for p in got] and all(
        a.kind == "stream" or same_parts([a], [b]) for a, b in zip(seen, got, strict=True)
    )


def _rewritten(outputs: Sequence[Mapping[str, Any]], rewrite: Any) -> list[Mapping[str, Any]]:
    """Outputs with their texts (streams, ``text/plain``) rewritten."""
    done: list[Mapping[str, Any]] = []
    for output in outputs:
        if output.get("output_type") == "stream":
            done.append({**output, "text": rewrite(output_text(output))})
        elif isinstance(output.get("data"), Mapping) and "text/plain" in output["data"]:
            done.append({**output, "data": {**output["data"], "text/plain": rewrite(output_text(output))}})
        else:
            done.append(output)
    return done


def _by_context(context: ReplayContext, difference: str, hint: str, second: str) -> Agreement:
    """The causes read from around the cell: an input from a step that disagreed, a second replay; else
    ``other``. ``difference`` is the first difference from the recording, ``second`` from the second replay."""
    if context.upstream:
        return Agreement(False, "upstream", _short(f"inputs from {context.upstream}"))
    if context.stable is False:
        return Agreement(False, "nondeterminism", _short(f"a second replay differs: {second}"))
    if context.stable is True:
        if context.drift:
            versions = ", ".join(f"{name} {old} -> {new}" for name, (old, new) in sorted(context.drift.items())[:4])
            more = f" (+{len(context.drift) - 4} more)" if len(context.drift) > 4 else ""
            return Agreement(False, "environment", _short(f"package versions differ: {versions}{more}"))
        return Agreement(False, "environment", _short(f"the same on a second replay; {difference}"))
    return Agreement(False, "other", _short(f"{difference}{hint}; not replayed twice"))


__all__ = [
    "DISAGREEMENTS",
    "KINDS",
    "NORMALIZATION_VERSION",
    "TOLERATED",
    "UPSTREAM_SOURCES",
    "Agreement",
    "AgreementKind",
    "ReplayContext",
    "agreement",
    "normalize_output",
    "normalize_outputs",
    "numpy_1_reprs",
]
