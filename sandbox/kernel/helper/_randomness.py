"""The global random generators: keep, rewind and reseed them; reseed generators made with no seed.

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from themisto_env.sandbox.compat.in_kernel import legacy_bit_generator
from themisto_env.sandbox.kernel.helper._namespace import _user_ns, user_names

#: The global random generators' states kept by `keep_random_state`, by key (in this module, not
#: the user's namespace; a restart forgets them).
_RANDOM_STATES: dict[str, dict[str, Any]] = {}


def keep_random_state(key: str) -> list[str]:
    """Keep the states of the global random generators (``random``'s, and numpy's legacy ``np.random``
    where numpy is imported) under ``key``, so that `put_back_random_state` can rewind them (a cell
    replayed a second time after the session seeded them draws what it drew the first time). Returns the
    generators kept."""
    import random

    states: dict[str, Any] = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            states["numpy"] = np.random.get_state()
    _RANDOM_STATES[key] = states
    return sorted(states)


def put_back_random_state(key: str) -> list[str]:
    """Rewind the global random generators to what `keep_random_state` kept under ``key``; returns
    those rewound (none for an unknown key)."""
    import random

    states = _RANDOM_STATES.get(key, {})
    done = []
    if "random" in states:
        random.setstate(states["random"])
        done.append("random")
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in states:
        with contextlib.suppress(Exception):
            np.random.set_state(states["numpy"])
            done.append("numpy")
    return done


def shuffle_random_state() -> list[str]:
    """Seed the global random generators (``random``'s, numpy's legacy ``np.random``) from the system's
    entropy, as a new process would have them: unseeded draws then differ from the last run's."""
    import random

    random.seed()
    done = ["random"]
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            np.random.seed()
            done.append("numpy")
    return done


#: Seeds at or above this are taken for the system's entropy (numpy's ``SeedSequence()`` draws 128 bits):
#: a generator made with no seed holds one; a seed a person typed (``default_rng(42)``) is smaller.
_DRAWN_ENTROPY = 2**64


def _unseeded(obj: Any, np: Any) -> bool:
    """Whether ``obj`` is a numpy ``Generator`` or ``RandomState`` seeded from the system's entropy (made with
    no seed): its ``SeedSequence`` holds 128 drawn bits. ``RandomState(7)`` and ``np.random.seed`` seed the
    legacy way and keep no sequence."""
    if isinstance(obj, np.random.Generator):
        bits = obj.bit_generator
    elif isinstance(obj, np.random.RandomState):
        bits = legacy_bit_generator(obj)
    else:
        return False
    entropy = getattr(getattr(bits, "seed_seq", None), "entropy", None)
    return isinstance(entropy, int) and entropy >= _DRAWN_ENTROPY


def reseed_generators() -> list[str]:
    """Reseed from the system's entropy the numpy generators of the user namespace that were made with no
    seed (`_unseeded`), as another run of the cell that made them would have them; one level into
    dicts, lists, tuples and objects' attributes too. Returns where they were (``rng``, ``gens['a']``)."""
    np = sys.modules.get("numpy")
    if np is None:
        return []
    found: list[tuple[str, Any]] = []
    ns = _user_ns()
    for name in user_names(include_modules=False):
        value = ns[name]
        found.append((name, value))
        with contextlib.suppress(Exception):  # an object whose attributes cannot be listed: itself only
            if isinstance(value, dict):
                found.extend((f"{name}[{k!r}]", v) for k, v in list(value.items())[:1000])
            elif isinstance(value, (list, tuple)):
                found.extend((f"{name}[{i}]", v) for i, v in enumerate(value[:1000]))
            elif not isinstance(value, type) and isinstance(vars(value), dict):
                found.extend((f"{name}.{k}", v) for k, v in list(vars(value).items())[:1000])
    done = []
    for where, value in found:
        with contextlib.suppress(Exception):
            if not _unseeded(value, np):
                continue
            if isinstance(value, np.random.RandomState):
                value.set_state(np.random.RandomState().get_state())
            else:
                value.bit_generator.state = type(value.bit_generator)().state
            done.append(where)
    return done
