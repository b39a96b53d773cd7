"""Chat models by provider name, and the one-line errors for what is missing."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from themisto_env.agents.fake_chat import ScriptedChatModel
from themisto_env.agents.providers import make_chat_model
from themisto_env.errors import ConfigError, ProviderError


class _FakeProviderModel:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def _install_fake_module(monkeypatch: pytest.MonkeyPatch, module: str, cls: str) -> None:
    fake = types.ModuleType(module)
    setattr(fake, cls, _FakeProviderModel)
    monkeypatch.setitem(sys.modules, module, fake)


@pytest.mark.parametrize(
    ("provider", "module"),
    [("openai", "langchain_openai"), ("anthropic", "langchain_anthropic"), ("ollama", "langchain_ollama")],
)
def test_a_missing_provider_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, provider: str, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # importing it raises ModuleNotFoundError
    package = module.replace("_", "-")
    with pytest.raises(ProviderError) as caught:
        make_chat_model(provider, "some-model")
    assert str(caught.value) == f"the {provider} provider needs {package}: pip install 'themisto-env[{provider}]'"


@pytest.mark.parametrize(
    ("provider", "module", "cls", "key"),
    [
        ("openai", "langchain_openai", "ChatOpenAI", "OPENAI_API_KEY"),
        ("anthropic", "langchain_anthropic", "ChatAnthropic", "ANTHROPIC_API_KEY"),
    ],
)
def test_a_missing_api_key_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, provider: str, module: str, cls: str, key: str
) -> None:
    _install_fake_module(monkeypatch, module, cls)
    monkeypatch.delenv(key, raising=False)
    with pytest.raises(ProviderError) as caught:
        make_chat_model(provider, "some-model")
    assert str(caught.value).startswith(f"the {provider} provider needs an API key: set {key} (or -M api_key=...")
    monkeypatch.setenv(key, "sk-test")
    model = make_chat_model(provider, "some-model", temperature=0)
    assert isinstance(model, _FakeProviderModel) and model.kwargs == {"model": "some-model", "temperature": 0}
    monkeypatch.delenv(key)
    assert make_chat_model(provider, "m", api_key="sk-x").kwargs["api_key"] == "sk-x"  # type: ignore[attr-defined]


def test_ollama_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _install_fake_module(monkeypatch, "langchain_ollama", "ChatOllama")
    model = make_chat_model("ollama", "qwen2.5-coder:7b", base_url="http://localhost:11434")
    assert model.kwargs == {"model": "qwen2.5-coder:7b", "base_url": "http://localhost:11434"}  # type: ignore[attr-defined]


def test_a_class_path_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    _install_fake_module(monkeypatch, "my_models", "MyChat")
    assert make_chat_model("my_models:MyChat", "m1").kwargs == {"model": "m1"}  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="my_models has no Nope"):
        make_chat_model("my_models:Nope", "m1")
    with pytest.raises(ProviderError, match=r"needs nowhere-pkg: install the package that provides nowhere_pkg\.x"):
        make_chat_model("nowhere_pkg.x:Chat", "m1")


def test_the_fake_provider_and_name_errors() -> None:
    model = make_chat_model("fake", responses=["hello"])
    assert isinstance(model, ScriptedChatModel) and model.invoke("hi").content == "hello"
    with pytest.raises(ConfigError, match="did you mean 'openai'"):
        make_chat_model("opneai", "gpt-4o-mini")
    with pytest.raises(ConfigError, match="needs a model name"):
        make_chat_model("anthropic")


def test_no_provider_package_is_imported_by_the_agents() -> None:
    import subprocess

    code = (
        "import sys, themisto_env.agents.llm, themisto_env.agents.llm_tools, themisto_env.agents.providers; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('langchain_openai', 'langchain_anthropic', 'langchain_ollama', 'openai', 'anthropic', 'ollama')]; "
        "assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_fake_provider_answers_every_call_of_a_dry_run() -> None:
    """``--model fake`` (no replies given) answers as many calls as a run makes, not one then a traceback."""
    from langchain_core.messages import HumanMessage

    from themisto_env.agents.providers import make_chat_model

    model = make_chat_model("fake")
    assert [model.invoke([HumanMessage("hi")]).content for _ in range(3)] == ["```\n```"] * 3
    once = make_chat_model("fake", responses=["a"], cycle=False)
    assert once.invoke([HumanMessage("hi")]).content == "a"
