"""The env's options are the task's; the kernel's are one `KernelSpec` value, given whole or flat."""

from __future__ import annotations

import gymnasium as gym
import pytest

from themisto_env.env.config import EnvConfig
from themisto_env.errors import ConfigError
from themisto_env.run.config import load_run_config
from themisto_env.run.rollout import env_options
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.models import SandboxLimits


def test_the_kernel_options_pass_as_one_spec_or_flat() -> None:
    whole = EnvConfig(kernel=KernelSpec("bwrap", fork=False, warm_kernels=0, snapshot_dir="/tmp/snaps"))
    flat = EnvConfig(backend="bwrap", fork=False, warm_kernels=0, snapshot_dir="/tmp/snaps")
    assert whole == flat
    kernel = flat.kernel
    assert (flat.backend, kernel.fork, kernel.warm_kernels, kernel.snapshot_dir) == ("bwrap", False, 0, "/tmp/snaps")
    assert "backend" not in EnvConfig.model_fields and "kernel" in EnvConfig.model_fields


def test_the_env_forks_unless_told_not_to() -> None:
    assert EnvConfig().kernel.fork is True
    assert EnvConfig(kernel=KernelSpec("docker")).kernel.fork is True
    assert EnvConfig(kernel=KernelSpec("docker", fork=False)).kernel.fork is False
    assert KernelSpec("local").forks is False  # a bare kernel is started, as before


def test_a_flat_option_goes_over_the_spec_given() -> None:
    config = EnvConfig(kernel=KernelSpec("docker", warm_kernels=3), environment="default", limits={"timeout_s": 5})
    assert config.kernel.backend == "docker" and config.kernel.warm_kernels == 3
    assert config.kernel.environment == "default"
    assert config.kernel.limits == SandboxLimits(timeout_s=5)


def test_kernels_on_ray_are_no_option_and_the_error_says_what_replaced_them() -> None:
    """Kernels on other machines are `themisto serve` there (docs/serving.md), not an env option."""
    for options in ({"ray": "local"}, {"kernel": {"ray": "auto"}}, {"kernel": {"backend": "docker", "ray": {}}}):
        with pytest.raises(ConfigError, match="kernels in Ray actors are gone; run `themisto serve`") as refused:
            EnvConfig(**options)
        assert "\n" not in str(refused.value)


def test_a_config_saved_before_the_ray_option_went_still_loads() -> None:
    """Configs and inspect logs written by earlier versions hold ``ray: null`` (flat and in the kernel's dump)."""
    old = {**EnvConfig(task="output", backend="docker").model_dump(), "ray": None}
    old["kernel"] = {**old["kernel"], "ray": None}
    assert EnvConfig(**old) == EnvConfig(task="output", backend="docker")
    assert EnvConfig.model_validate_json(EnvConfig(**old).model_dump_json()).backend == "docker"


def test_an_inspect_log_written_before_the_ray_option_went_reads_its_sandbox() -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai.util import SandboxEnvironmentSpec

    from themisto_env.bridges.inspect_sandbox import SandboxConfig

    dump = SandboxConfig(task="next-cell", tool_budget=3).model_dump(mode="json")
    dump["kernel"]["ray"] = None  # what every KernelSpec dumped before
    spec = SandboxEnvironmentSpec.model_validate({"type": "themisto", "config": dump})
    assert isinstance(spec.config, SandboxConfig) and spec.config.tool_budget == 3


def test_a_config_survives_its_dump() -> None:
    config = EnvConfig(task="output", backend="docker", limits={"timeout_s": 5}, fork=False)
    assert EnvConfig(**config.model_dump()) == config
    assert EnvConfig.model_validate_json(config.model_dump_json()) == config


def test_the_warm_kernels_are_no_part_of_the_kind() -> None:
    assert KernelSpec("local", warm_kernels=4) == KernelSpec("local")
    assert {KernelSpec("local"): 1}[KernelSpec("local", warm_kernels=0)] == 1


@pytest.mark.parametrize(
    ("options", "line"),
    [
        ({"backnd": "docker"}, "invalid environment options: backnd: no such option; did you mean 'backend'?"),
        ({"kernel": {"wram_kernels": 2}}, "kernel.wram_kernels: no such option; did you mean 'warm_kernels'?"),
        ({"histroy_length": 3}, "histroy_length: no such option; did you mean 'history_length'?"),
    ],
)
def test_an_unknown_option_is_one_line_naming_the_nearest(options: dict, line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        EnvConfig(**options)
    assert line in str(raised.value) and "\n" not in str(raised.value)


def test_a_run_config_takes_a_kernel_block(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("task: next-cell\nkernel:\n  backend: docker\n  fork: false\n  warm_kernels: 0\n")
    config = load_run_config(path)
    assert config.backend == "docker"
    env = EnvConfig(**env_options(config, None))
    assert env.kernel.backend == "docker" and env.kernel.fork is False and env.kernel.warm_kernels == 0
    path.write_text("kernel:\n  frok: false\n")
    with pytest.raises(ConfigError, match=r"run\.yaml: env\.kernel\.frok: no such option; did you mean 'fork'\?"):
        load_run_config(path)
    path.write_text("backend: bwrap\nkernel:\n  backend: docker\n")
    with pytest.raises(ConfigError, match="the backend is given twice"):
        load_run_config(path)


def test_gym_make_takes_a_kernel_spec(env_dataset: dict[str, str]) -> None:
    env = gym.make("themisto/NextCell-v0", kernel=KernelSpec("local", warm_kernels=0), **env_dataset)
    try:
        episode = env.unwrapped.episode
        assert episode.config.kernel.backend == "local" and episode.config.kernel.warm_kernels == 0
        assert episode.spec.fork is True and episode.spec.preload  # the dataset's imports, added by the env
    finally:
        env.close()
