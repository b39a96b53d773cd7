"""How many sessions a server says fit, and the descriptor limit it lifts before serving them."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from themisto_env.bridges.openenv.capacity import DESCRIPTORS_PER_SESSION, SessionCapacity, session_capacity

LIFT = """
import json, resource
from themisto_env.bridges.openenv.capacity import raise_open_file_limit, session_capacity
low = session_capacity().by_descriptors
print(json.dumps([raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE), low,
                  session_capacity().by_descriptors]))
"""


def test_the_soft_descriptor_limit_is_lifted_to_the_hard_one_and_more_sessions_fit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = 512 if hard == resource.RLIM_INFINITY else min(512, hard)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run([sys.executable, "-c", LIFT], preexec_fn=lower, capture_output=True, text=True, check=True)
    (before, after), limits, low, high = json.loads(out.stdout)
    assert before == soft and limits == [after, hard]
    if hard not in (soft, resource.RLIM_INFINITY):
        assert after == hard and high > low
    assert low == max(0, (soft - 256) // DESCRIPTORS_PER_SESSION)


def test_the_capacity_is_the_smaller_bound_and_says_both() -> None:
    capacity = SessionCapacity(
        by_memory=600, by_descriptors=100, available_bytes=24 * 2**30, descriptor_limit=1156, session_mib=40
    )
    assert capacity.sessions == 100
    assert "about 100" in capacity.text() and "600 in memory" in capacity.text() and "1156" in capacity.text()
    measured = session_capacity(session_mib=1.0)
    assert measured.by_memory is None or measured.by_memory > session_capacity(session_mib=100.0).by_memory  # type: ignore[operator]
