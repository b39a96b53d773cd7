"""Secrets never written: which option names and values are secrets, and their removal from records.

A value is a secret when it sits under a secret-like name ([`is_secret_name`][themisto_env.redaction.is_secret_name]:
``api_key``, ``api-key``, ``x-api-key``, ``key``, ``token``, ``secret``, ``password``, ``authorization``,
``credentials``, ... at any depth, e.g. in ``default_headers``), when it is the password of a URL
(``http://user:PASSWORD@host``) or a key-like query parameter of one (``?api-key=...``), or when it is the value of an
environment variable with such a name (``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``).

[`redact`][themisto_env.redaction.redact] replaces them with ``[REDACTED]``: the whole value under a secret-like name,
and, for values long enough to be real keys ([`MIN_SECRET_CHARS`][themisto_env.redaction.MIN_SECRET_CHARS]), every
occurrence in any string (a key echoed by a server into a reply, or quoted in an error). Short placeholders (``EMPTY``,
``ollama``, ``x``: what local servers take as a key) are removed only where they are named, never as substrings of code
or text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 12
"""Secrets at least this long are also replaced wherever they appear in text."""

_SECRET_WORDS = frozenset({"key", "apikey", "secret", "token", "password", "passwd", "authorization", "auth"})
_SECRET_PARTS = ("apikey", "secret", "password", "passwd", "credential", "accesskey", "privatekey")
_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an option, header or variable named ``name`` holds a secret (case and separators ignored):
    ``api_key``, ``API-Key``, ``x-api-key``, ``apiKey``, ``key``, ``Authorization``, ``HF_TOKEN``,
    ``accessToken``, ``AWS_SECRET_ACCESS_KEY``, ``password``; not ``max_tokens`` or ``author``."""
    lowered = name.lower()
    words = set(re.split(r"[-_\s.]+", lowered))
    joined = re.sub(r"[-_\s.]+", "", lowered)
    return bool(words & _SECRET_WORDS) or any(part in joined for part in _SECRET_PARTS) or joined.endswith("token")


def url_secrets(text: str) -> set[str]:
    """The passwords and key-like query values of the URLs in ``text``."""
    found: set[str] = set()
    for url in _URL.findall(text):
        try:
            parts = urlsplit(url)
            password = parts.password
        except ValueError:
            continue
        if password:
            found.add(password)
        found.update(value for name, value in parse_qsl(parts.query) if value and is_secret_name(name))
    return found


def secret_values(options: Any, name: str = "") -> set[str]:
    """Every secret in a nest of options (dicts, lists, strings): values under secret-like names, and the
    passwords and key-like query values of URLs."""
    if isinstance(options, Mapping):
        return set().union(set(), *(secret_values(v, str(k)) for k, v in options.items()))
    if isinstance(options, list | tuple | set):
        return set().union(set(), *(secret_values(v, name) for v in options))
    if isinstance(options, str):
        return ({options} if name and is_secret_name(name) and options else set()) | url_secrets(options)
    return set()


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """The values of secret-like environment variables long enough to be real keys."""
    environ = os.environ if environ is None else environ
    return {v for k, v in environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_CHARS}


def _clean_url(url: str) -> str:
    """A URL with its password and key-like query values replaced (short ones too)."""
    for secret in url_secrets(url):
        url = url.replace(f":{secret}@", f":{REDACTED}@").replace(f"={secret}", f"={REDACTED}")
    return url


def without_secrets(options: Any) -> Any:
    """``options`` with every secret-named entry dropped and URL passwords removed (for a record of what was
    asked, such as a row's model parameters)."""
    if isinstance(options, Mapping):
        return {k: without_secrets(v) for k, v in options.items() if not is_secret_name(str(k))}
    if isinstance(options, list | tuple):
        return [without_secrets(v) for v in options]
    if isinstance(options, str):
        return redact(options, ())
    return options


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` with secrets replaced by ``[REDACTED]``: the whole value under a secret-like name, at any
    depth; and every occurrence, in any string, of the secrets at least
    [`MIN_SECRET_CHARS`][themisto_env.redaction.MIN_SECRET_CHARS] long and of URL passwords (see the module
    docstring)."""
    secrets = set(secrets)
    long = sorted((s for s in secrets if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)

    def clean(item: Any, name: str = "") -> Any:
        if isinstance(item, str):
            if name and item and is_secret_name(name):
                return REDACTED
            for secret in long:
                item = item.replace(secret, REDACTED)
            return _URL.sub(lambda m: _clean_url(m.group(0)), item) if "://" in item else item
        if isinstance(item, Mapping):
            return {k: clean(v, str(k)) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v, name) for v in item]
        return item

    return clean(value)


__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "environment_secrets",
    "is_secret_name",
    "redact",
    "secret_values",
    "url_secrets",
    "without_secrets",
]
