"""The bridges use the env's parts: none builds a whole gym env (issue 29), and their options come from
[`EnvConfig`][themisto_env.env.EnvConfig]."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import themisto_env.bridges

BRIDGES = Path(themisto_env.bridges.__file__).parent
ENV_CLASS = "ThemistoEnv"


def _constructions(source: str, where: str) -> list[str]:
    """Where a module calls ``ThemistoEnv(...)`` (by its name, an alias of it, or ``module.ThemistoEnv``)."""
    tree = ast.parse(source, filename=where)
    names = {ENV_CLASS}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname for alias in node.names if alias.name == ENV_CLASS and alias.asname)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if called in names:
            found.append(f"{where}:{node.lineno}")
    return found


def test_no_bridge_constructs_a_gym_env() -> None:
    modules = sorted(BRIDGES.rglob("*.py"))
    assert len(modules) > 10, "the bridges' modules are found"
    found = [
        where
        for path in modules
        for where in _constructions(path.read_text(encoding="utf-8"), str(path.relative_to(BRIDGES.parent.parent)))
    ]
    assert found == [], f"bridges build a whole env instead of using its parts: {found}"


def test_the_check_sees_a_construction() -> None:
    aliased = "from themisto_env.env.core import ThemistoEnv as E\nenv = E(task='output')\n"
    assert _constructions(aliased, "probe.py") == ["probe.py:2"]
    dotted = "import themisto_env.env.core as core\n\ndef f():\n    return core.ThemistoEnv()\n"
    assert _constructions(dotted, "probe.py") == ["probe.py:4"]
    assert _constructions("from themisto_env.env.core import ThemistoEnv\nx: ThemistoEnv\n", "probe.py") == []


def test_the_sandbox_config_is_the_env_config() -> None:
    pytest.importorskip("inspect_ai", reason="inspect_ai is not installed (pip install -e '.[inspect]')")
    from themisto_env.bridges.inspect_sandbox import SandboxConfig
    from themisto_env.env.config import EnvConfig

    assert issubclass(SandboxConfig, EnvConfig)
    assert SandboxConfig.model_fields.keys() == EnvConfig.model_fields.keys(), "no field repeated or added by hand"
    config = SandboxConfig(task="output", tool_budget=3, limits={"timeout_s": 5})
    assert hash(config) == hash(SandboxConfig(**config.model_dump())), "inspect hashes it"
    assert config.env_config() == EnvConfig(task="output", tool_budget=3, limits={"timeout_s": 5})
    listed = SandboxConfig(kernel={"backend": "docker", "launcher_options": {"volumes": ["a"]}})  # a list: unhashable
    assert hash(listed) == hash(SandboxConfig(**listed.model_dump())), "hashed through its JSON form"


def test_an_openenv_session_draws_the_trajectory_the_gym_env_draws_for_a_seed() -> None:
    """The session steps an episode, not a gym env: a ``seed`` still draws as ``gymnasium`` seeds (bundled data)."""
    pytest.importorskip("openenv", reason="openenv-core is not installed (pip install -e '.[serve]')")
    from themisto_env.bridges.openenv.environment import ThemistoServedEnv
    from themisto_env.bridges.openenv.models import ThemistoAction
    from themisto_env.env.core import ThemistoEnv

    options = {"task": "output", "observation": "static"}
    gym_env, session = ThemistoEnv(**options), ThemistoServedEnv(options)
    try:
        for seed in range(6):
            _, info = gym_env.reset(seed=seed)
            served = session.reset(seed=seed)
            assert served.info == info, seed
            _, expected, *_ = gym_env.step({"kind": 1, "text": "x"})
            assert session.step(ThemistoAction.predict("x")).reward == expected
        drawn = [gym_env.reset()[1]["trajectory_id"] for _ in range(5)]  # unseeded: the seeded generator goes on
        assert drawn == [session.reset().info["trajectory_id"] for _ in range(5)]
    finally:
        gym_env.close()
        session.close()


def test_the_inspect_tasks_options_default_to_the_env_configs() -> None:
    """The inspect task's ``-T`` options are the env's: each default is EnvConfig's (``reward=None``: its default),
    the kernel's (``backend``, ...) its kernel spec's."""
    pytest.importorskip("inspect_ai", reason="inspect_ai is not installed (pip install -e '.[inspect]')")
    import inspect

    from themisto_env.bridges.inspect_task import themisto
    from themisto_env.env.config import KERNEL_OPTIONS, EnvConfig

    fields, parameters = EnvConfig.model_fields, inspect.signature(themisto).parameters
    shared = {name: {"data": "dataset"}.get(name, name) for name in parameters}
    flat = {name for name in shared if name in KERNEL_OPTIONS}
    shared = {name: field for name, field in shared.items() if field in fields or field in flat}
    assert len(shared) >= 10 and "backend" in flat
    spec = EnvConfig().kernel
    for name, field in shared.items():
        default = parameters[name].default
        expected = getattr(spec, field) if field in flat else fields[field].get_default(call_default_factory=True)
        assert default == expected or (name == "reward" and default is None), name  # None: the env's weights
