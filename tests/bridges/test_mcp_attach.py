"""``themisto mcp --attach CONNECTION_FILE`` on a real running kernel (a user's, started here with
jupyter_client as Jupyter starts one): the read-only tools answer from its state, and its namespace
fingerprint, execution counter and history are the same before and after."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'themisto-env[mcp]'")

from jupyter_client.manager import KernelManager

from tests.bridges.mcp_support import stdio_session
from themisto_env.bridges.mcp.attach import AttachedKernel

USER_CELLS = [
    "import pandas as pd",
    "x = 41 + 1",
    "df = pd.DataFrame({'a': [1, 2, 3]})",
    "df.shape",
    "def f(y):\n    return y",
]


@pytest.fixture(scope="module")
def user_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KernelManager, Path]]:
    """A running kernel with a user's few cells run in it, and its connection file."""
    folder = tmp_path_factory.mktemp("runtime")
    manager = KernelManager(connection_file=str(folder / "kernel-user.json"))
    manager.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    manager.start_kernel()
    client = manager.blocking_client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    for cell in USER_CELLS:
        client.execute_interactive(cell, timeout=60)
    client.stop_channels()
    try:
        yield manager, Path(manager.connection_file)
    finally:
        manager.shutdown_kernel(now=True)


def _readings(manager: KernelManager, connection_file: Path) -> dict[str, object]:
    """What must not change: the counter, In, Out and _ (read silently, before any attach the first time),
    then the namespace fingerprint (through the helper)."""
    client = manager.blocking_client()
    client.start_channels()
    try:
        expressions = {
            "count": "get_ipython().execution_count",
            "history": "list(In)",
            "out": "sorted(Out)",
            "last": "repr(_)",
        }
        msg_id = client.execute("", silent=True, store_history=False, user_expressions=expressions)
        reply = client.get_shell_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == msg_id
        values = {key: value["data"]["text/plain"] for key, value in reply["content"]["user_expressions"].items()}
    finally:
        client.stop_channels()
    kernel = AttachedKernel(connection_file)
    try:
        fingerprint = kernel.introspect.fingerprint()
    finally:
        kernel.close()
    return {"fingerprint": fingerprint, **values}


def test_attach_mode_answers_from_the_kernel_and_leaves_its_fingerprint_unchanged(
    user_kernel: tuple[KernelManager, Path],
) -> None:
    manager, connection_file = user_kernel
    before = _readings(manager, connection_file)
    assert {"x", "df", "f"} <= set(before["fingerprint"])  # type: ignore[arg-type]

    async def session() -> dict[str, object]:
        answers: dict[str, object] = {}
        async with stdio_session("--attach", str(connection_file)) as client:
            answers["tools"] = [tool.name for tool in (await client.list_tools()).tools]
            for name, args in [
                ("list_variables", {}),
                ("inspect_variable", {"name": "x"}),
                ("dataframe_head", {"name": "df"}),
                ("get_source", {"name": "f"}),
                ("memory_usage", {}),
                ("inspect_variable", {"name": "nope"}),
                ("try_cell", {"code": "x = 0"}),
                ("start_sample", {}),
            ]:
                result = await client.call_tool(name, args)
                answers[name if name != "inspect_variable" or "x" in args.values() else "unknown"] = result
        return answers

    answers = anyio.run(session)
    assert "start_sample" not in answers["tools"] and "try_cell" not in answers["tools"]
    assert "list_variables" in answers["tools"] and "dataframe_head" in answers["tools"]
    listing = answers["list_variables"]
    assert not listing.is_error and "df" in listing.content[0].text and "x" in listing.content[0].text
    assert "42" in answers["inspect_variable"].content[0].text
    assert not answers["dataframe_head"].is_error and "a" in answers["dataframe_head"].content[0].text
    assert "return y" in answers["get_source"].content[0].text
    assert answers["unknown"].is_error
    assert answers["try_cell"].is_error and answers["start_sample"].is_error  # no code runs, no episode
    assert _readings(manager, connection_file) == before
