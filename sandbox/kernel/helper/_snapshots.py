"""Snapshots of the user namespace with dill: write one to the kernel's outbox, restore one.

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from typing import Any

from themisto_env.sandbox.kernel.helper._display import OPTIONS_KEY, _display_options, set_display_options
from themisto_env.sandbox.kernel.helper._fingerprint import namespace_fingerprint
from themisto_env.sandbox.kernel.helper._namespace import _user_ns, user_names


def _stable_dumps(obj: Any) -> bytes:
    """``dill.dumps`` (file contents kept, ``recurse=False``) with the bytes made the same in every process
    where a library keys its state by ``id()``: matplotlib's transforms keep their parents in a dict keyed
    by the parents' ids (addresses) and pickle it so; here its keys are numbered in order instead (its own
    unpickling makes the same weak references of them, and only ever uses the keys to drop dead ones)."""
    import copyreg

    import dill

    transforms = sys.modules.get("matplotlib.transforms")
    node = getattr(transforms, "TransformNode", None)

    class StablePickler(dill.Pickler):  # type: ignore[misc]
        def reducer_override(self, obj: Any) -> Any:
            if node is not None and isinstance(obj, node) and hasattr(obj, "__getstate__"):
                state = obj.__getstate__()
                if isinstance(state, dict) and isinstance(state.get("_parents"), dict):
                    state["_parents"] = dict(enumerate(state["_parents"].values()))
                    return (copyreg.__newobj__, (type(obj),), state)
            return NotImplemented

    buffer = io.BytesIO()
    StablePickler(buffer, None, byref=None, fmode=dill.FILE_FMODE, recurse=False).dump(obj)
    return buffer.getvalue()


def snapshot(store: str) -> dict[str, Any]:
    """Save the user namespace with dill to ``<store>/<sha[:2]>/<sha>.dill``; unpicklable names skipped.

    ``store`` is the kernel's own outbox: the host checks the file's hash and moves it into the store
    (so a partial file from a failed write is never taken in). Open files are saved with their
    contents and position (dill's FILE_FMODE), so they come back even in a fresh kernel whose working
    directory does not hold the file.
    """
    import dill

    ns = _user_ns()
    names = user_names()
    state = {name: ns[name] for name in names}
    skipped: dict[str, str] = {}
    options = _display_options()
    if options:
        try:
            dill.dumps(options, recurse=False)
            state[OPTIONS_KEY] = options
        except Exception as exc:  # left out: the state check then shows the difference
            skipped[OPTIONS_KEY] = f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        data = _stable_dumps(state)
    except Exception:
        for name in names:
            try:
                _stable_dumps(state[name])
            except Exception as exc:
                skipped[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        for name in skipped:
            state.pop(name, None)
        data = _stable_dumps(state)
    digest = hashlib.sha256(data).hexdigest()
    folder = os.path.join(store, digest[:2])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, digest + ".dill"), "wb") as f:
        f.write(data)
    return {"digest": digest, "size_bytes": len(data), "names": sorted(set(state) - {OPTIONS_KEY}), "skipped": skipped}


def restore(path: str, digest: str, clean: bool = True, keep: list[str] | None = None) -> dict[str, Any]:
    """Load a snapshot into the user namespace, after checking that its bytes hash to ``digest``.

    The bytes are read once, hashed and loaded from memory, so what is checked is what is loaded. With
    ``clean``, user names not in the snapshot are removed first, except those in ``keep`` (names the
    snapshot could not hold, rebuilt by replay).
    """
    import dill

    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        return {"corrupt": f"content hash {hashlib.sha256(data).hexdigest()[:12]} does not match its name"}
    state = dill.loads(data)
    if not isinstance(state, dict):
        return {"corrupt": f"holds a {type(state).__name__}, not a namespace"}
    set_display_options(state.pop(OPTIONS_KEY, {}))
    ns = _user_ns()
    if clean:
        kept = set(keep or ())
        for name in user_names():
            if name not in state and name not in kept:
                del ns[name]
    ns.update(state)
    return {"names": sorted(state), "fingerprint": namespace_fingerprint()}
