"""Experiment configs: YAML or JSON files of pure data, validated by pydantic (unknown keys are errors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from themisto_env.errors import ConfigError
from themisto_env.runner import RunConfig


def load_run_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a run config (or the defaults), apply command-line overrides, validate.

    Raises:
        ConfigError: The file is unreadable, or a key is unknown or a value invalid (named in the message).
    """
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text()
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text) or {}
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read the config: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a config is a mapping of keys to values")
    data.update(overrides or {})
    try:
        return RunConfig(**data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path or 'options'}: {problems}") from None
