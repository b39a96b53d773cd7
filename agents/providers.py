"""Chat models chosen by configuration: ``make_chat_model("openai", "gpt-4o-mini")``.

One name per provider (``openai``, ``anthropic``, ``ollama``, ``fake``, or ``package.module:Class``) makes
the langchain-core chat model; the table of what each needs is on `make_chat_model`. Provider packages are
imported when a model is made, never at import, and a missing package or key raises one line that fixes it.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from themisto_env.errors import ConfigError, ProviderError, did_you_mean

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


@dataclass(frozen=True)
class Provider:
    """A named LLM provider.

    Attributes:
        module: The module holding the chat model class.
        cls: The class name.
        extra: The ``themisto-env`` extra that installs the module.
        key: The environment variable holding the API key, if one is needed.
        keyless_base_url: With a ``base_url`` (a local server) no key is needed: ``EMPTY`` is sent without one.
    """

    module: str
    cls: str
    extra: str | None = None
    key: str | None = None
    keyless_base_url: bool = False


PROVIDERS: dict[str, Provider] = {
    "openai": Provider("langchain_openai", "ChatOpenAI", extra="openai", key="OPENAI_API_KEY", keyless_base_url=True),
    "anthropic": Provider("langchain_anthropic", "ChatAnthropic", extra="anthropic", key="ANTHROPIC_API_KEY"),
    "ollama": Provider("langchain_ollama", "ChatOllama", extra="ollama"),
    "fake": Provider("themisto_env.agents.fake_chat", "ScriptedChatModel"),
}


LOCAL_SERVER_KEY = "EMPTY"
"""The key sent to a local OpenAI-compatible server given no key (vLLM's and llama.cpp's convention)."""


def make_chat_model(provider: str, model: str | None = None, **kwargs: Any) -> BaseChatModel:
    """Make a langchain-core chat model.

    ========================  ==========================  ==================================================
    provider                  needs                       made as
    ========================  ==========================  ==================================================
    ``openai``                ``themisto-env[openai]``,   ``langchain_openai.ChatOpenAI(model=..., **kw)``
                              ``OPENAI_API_KEY`` (none
                              with ``base_url``)
    ``anthropic``             ``themisto-env[anthropic]``,  ``langchain_anthropic.ChatAnthropic(model=..., **kw)``
                              ``ANTHROPIC_API_KEY``
    ``ollama``                ``themisto-env[ollama]``,   ``langchain_ollama.ChatOllama(model=..., **kw)``
                              a running Ollama server
    ``fake``                  nothing                     `ScriptedChatModel`
                                                          replaying ``responses=[...]`` in a cycle (tests,
                                                          dry runs)
    ``package.module:Class``  that package                ``Class(model=..., **kw)``, any ``BaseChatModel``
    ========================  ==========================  ==================================================

    An API key may also be passed as ``api_key=...``. The ``openai`` provider given a ``base_url`` (a local
    OpenAI-compatible server: vLLM, llama.cpp, LM Studio) needs no key: without one it sends ``EMPTY``.

    Args:
        provider: ``openai``, ``anthropic``, ``ollama``, ``fake``, or ``package.module:ClassName``.
        model: The model name (e.g. ``gpt-4o-mini``, ``claude-3-5-haiku-latest``, ``qwen2.5-coder:7b``);
            ignored by ``fake``.
        **kwargs: Passed to the model class (``temperature``, ``base_url``, ``api_key``, ...; for ``fake``:
            ``responses`` and ``cycle``).

    Returns:
        The chat model.

    Raises:
        ProviderError: The provider's package is not installed, or its API key is not set.
        ConfigError: Unknown provider name, no ``model`` for a provider that needs one, or options the model
            class refuses (one line).
    """
    if ":" in provider:
        module_name, _, cls_name = provider.partition(":")
        spec = Provider(module_name, cls_name)
    elif provider in PROVIDERS:
        spec = PROVIDERS[provider]
    else:
        raise ConfigError(
            f"unknown LLM provider {provider!r}{did_you_mean(provider, PROVIDERS, listed=False)} (providers: "
            f"{', '.join(PROVIDERS)}, or 'package.module:ClassName' for any langchain-core chat model)"
        )
    if provider == "fake":  # a dry run (--model fake) answers every call: its replies cycle unless told not to
        return _import_class(provider, spec)(**{"cycle": True, **kwargs})
    if not model:
        raise ConfigError(
            f"the {provider} provider needs a model name: --model {provider}/NAME on the command line "
            f"(make_chat_model({provider!r}, model=...) in code)"
        )
    cls = _import_class(provider, spec)
    if spec.key is not None and not kwargs.get("api_key") and not os.environ.get(spec.key):
        if not (spec.keyless_base_url and kwargs.get("base_url")):
            raise ProviderError(
                f"the {provider} provider needs an API key: set {spec.key} (or -M api_key=... on the command "
                "line, model_args: {api_key: ...} in a config, api_key=... in code)"
                + ("; a local server (--base-url) needs none" if spec.keyless_base_url else "")
            )
        kwargs["api_key"] = LOCAL_SERVER_KEY
    try:
        return cls(model=model, **kwargs)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError too: a bad -M value, an unknown option
        problem = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]
        raise ConfigError(f"the {provider} model {model!r} does not take these options: {problem}") from None


def _import_class(provider: str, spec: Provider) -> Any:
    try:
        module = importlib.import_module(spec.module)
    except ImportError as exc:
        top = spec.module.split(".")[0]
        package = top.replace("_", "-")
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == top
        why = "" if missing else f" (importing {spec.module} failed: {exc})"
        if spec.extra is not None:
            fix = f"pip install 'themisto-env[{spec.extra}]'"
        else:
            fix = f"install the package that provides {spec.module} (pip install {package}?)"
        raise ProviderError(f"the {provider} provider needs {package}{why}: {fix}") from exc
    try:
        return getattr(module, spec.cls)
    except AttributeError:
        raise ConfigError(f"{spec.module} has no {spec.cls} (provider {provider!r})") from None


__all__ = ["LOCAL_SERVER_KEY", "PROVIDERS", "Provider", "make_chat_model"]
