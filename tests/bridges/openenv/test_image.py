"""The server image for real: built offline (cached by its tag), run as a container with a port published on
127.0.0.1, spoken to by [`ThemistoEnvClient`][themisto_env.bridges.openenv.ThemistoEnvClient] from the host.

An episode over the container pays the in-process env's rewards; the bundled data is in the image (the
container serves at once, replaying nothing); a request without the token is refused; and the image will
not start without a token. Every container is removed by id, whatever the test's outcome.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("openenv.core", reason="openenv-core is not installed: pip install 'themisto-env[serve]'")

import httpx
from rich.console import Console

from tests.conftest import needs
from themisto_env.bridges.openenv.client import ThemistoEnvClient
from themisto_env.bridges.openenv.image import CONTAINER_PORT, TOKEN_VARIABLE, build_server_image
from themisto_env.bridges.openenv.models import ThemistoAction
from themisto_env.env.core import ThemistoEnv
from themisto_env.sandbox.engine import docker_client, image_id

TOKEN = "s3cret-token-for-the-image-test"
LABEL = {"themisto-env.test": "openenv-image"}


@pytest.fixture(scope="module")
@needs("docker")
def server_image(docker_engine: None) -> str:
    """The server image, built unless it exists (minutes the first time; seconds when cached)."""
    return build_server_image(console=Console(stderr=True))


@contextlib.contextmanager
def _container(image: str, **options: Any) -> Iterator[Any]:
    """A container of ``image`` (detached, with ``docker run --init``), removed by id at the end."""
    container = docker_client().containers.run(image, detach=True, init=True, labels=LABEL, **options)
    try:
        yield container
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def _serving_url(container: Any, timeout: float = 120.0) -> str:
    """The host URL of the container's published port, once /health answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        if container.status == "exited":
            raise AssertionError(f"the container exited: {container.logs().decode(errors='replace')[-3000:]}")
        bound = (container.ports or {}).get(f"{CONTAINER_PORT}/tcp")
        if bound:
            url = f"http://127.0.0.1:{bound[0]['HostPort']}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url
        time.sleep(0.2)
    raise AssertionError(f"no /health within {timeout} s: {container.logs().decode(errors='replace')[-3000:]}")


ACTIONS = [ThemistoAction.call("list_variables"), ThemistoAction.predict("df = pd.read_csv('wine.csv')")]


def test_a_container_serves_an_episode_with_the_in_process_reward_and_refuses_a_missing_token(
    server_image: str,
) -> None:
    local = ThemistoEnv(task="next-cell", observation="tools")
    try:
        local.reset(options={"trajectory": 0, "sample": 0})
        expected = [local.step(action.env_action()) for action in ACTIONS]
    finally:
        local.close()
    ports = {f"{CONTAINER_PORT}/tcp": ("127.0.0.1", None)}
    environment = {TOKEN_VARIABLE: TOKEN}
    with _container(server_image, ports=ports, environment=environment, command=["--max-sessions", "2"]) as box:
        url = _serving_url(box)
        with ThemistoEnvClient(url, token=TOKEN, message_timeout_s=300).sync() as env:
            env.reset(trajectory=0, sample=0)
            got = [env.step(action) for action in ACTIONS]
        assert httpx.get(f"{url}/metadata", timeout=30).status_code == 401
        assert httpx.get(f"{url}/metadata", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
        with pytest.raises(ConnectionError), ThemistoEnvClient(url, token="wrong").sync() as env:
            env.reset()
        logs = box.logs().decode(errors="replace")
    for (obs, reward, _terminated, _truncated, info), result in zip(expected, got, strict=True):
        assert result.reward == reward
        assert result.observation.tool_result == obs["tool_result"]
        assert result.observation.info.get("scores") == info.get("scores")
    assert got[1].observation.info["scored_sample_id"] is not None
    # the data is in the image, whole: nothing replayed at the start, every snapshot's package present
    assert "building the bundled data" not in logs and "lacks packages" not in logs, logs[-3000:]


def test_the_image_is_built_once_for_its_inputs(server_image: str) -> None:
    # built again here only if a source file changed since the fixture (a shared checkout); then not again
    name = build_server_image(console=Console(stderr=True, quiet=True))
    before = image_id(docker_client(), name)
    assert build_server_image(console=Console(stderr=True, quiet=True)) == name  # same inputs, same tag
    assert image_id(docker_client(), name) == before, "an image that exists is not built again"


def test_the_container_refuses_to_start_without_a_token(server_image: str) -> None:
    with _container(server_image) as box:
        status = box.wait(timeout=60)
        logs = box.logs().decode(errors="replace").strip()
    assert status["StatusCode"] == 2
    assert len(logs.splitlines()) == 1 and TOKEN_VARIABLE in logs and logs.startswith("error:"), logs
