"""Configuration from the environment, in the OpenTelemetry style (docs/configuration.md).

Zero-code users (``opentelemetry-instrument``) reach no keyword argument, so each setting of
:class:`~etf_otel.instrumentation._setup.Instrumentation` and of the client instrumentors has
an environment variable too (the names are in :mod:`etf_otel.attributes`):

* ``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME``: ``provider_name``, any non-empty string;
* ``OTEL_INSTRUMENTATION_ETF_ALLOW``: ``allow``, compatibility rule names, comma-separated;
* ``OTEL_INSTRUMENTATION_ETF_DENY``: ``deny``, the same, turned off (a default one too);
* ``OTEL_INSTRUMENTATION_ETF_GUARD``: ``guard``, ``true`` or ``false``;
* ``ETF_OTEL_GUARD_REQUESTS``: ``guard_requests``, ``true`` or ``false``;
* ``OTEL_INSTRUMENTATION_ETF_MAX_CONVERSATIONS``: ``max_conversations``, a positive integer.

``capture_content`` keeps its GenAI variable, read by
:func:`~etf_otel.instrumentation._telemetry.capture_content_enabled`.

The environment is read when a setup is made (an ``Instrumentation``, an instrumentor's
``instrument()``, a shared setup of the convenience functions), never per call; a keyword
argument that is given (not ``None``) wins over it. A value
that cannot be used never raises into the application: it is ignored, with one warning per
variable and value on the ``etf_otel`` logger (an unknown rule name is dropped and the
others are kept; ``GUARD`` other than ``true``/``false`` is ``false``, as the OpenTelemetry
boolean variables are; a bad ``MAX_CONVERSATIONS`` leaves the default).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from etf_otel import attributes as A
from etf_otel.core._identity import CompatibilityRule

__all__ = ["EnvironmentSettings", "environment_max_conversations", "environment_settings"]

_logger = logging.getLogger("etf_otel")

_RULES: Final = {rule.value: rule for rule in CompatibilityRule}

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class EnvironmentSettings:
    """The settings of one :class:`~etf_otel.instrumentation._setup.Instrumentation` the environment gives.

    ``None`` where a variable is unset (or unusable).
    """

    provider_name: str | None = None
    allow: tuple[CompatibilityRule, ...] | None = None
    guard: bool | None = None
    deny: tuple[CompatibilityRule, ...] | None = None
    guard_requests: bool | None = None


def _warn_once(variable: str, value: str, problem: str) -> None:
    """Log ``problem`` once per process for this variable and value."""
    with _warned_lock:
        if (variable, value) in _warned:
            return
        _warned.add((variable, value))
    _logger.warning("etf-otel: %s=%r %s", variable, value, problem)


def _allow(raw: str, variable: str = A.ENV_ALLOW) -> tuple[CompatibilityRule, ...]:
    rules: list[CompatibilityRule] = []
    for part in raw.split(","):
        name = part.strip().lower()
        if not name:
            continue
        rule = _RULES.get(name)
        if rule is None:
            _warn_once(variable, part.strip(), f"names no compatibility rule ({', '.join(_RULES)}): ignored")
        elif rule not in rules:
            rules.append(rule)
    return tuple(rules)


def _guard(raw: str, variable: str = A.ENV_GUARD) -> bool:
    value = raw.strip().lower()
    if value == "true":
        return True
    if value not in ("false", ""):
        _warn_once(variable, raw, "is neither true nor false: the guard is off")
    return False


def _max_conversations(raw: str) -> int | None:
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        _warn_once(A.ENV_MAX_CONVERSATIONS, raw, "is not a positive integer: ignored")
        return None
    return value


def environment_settings(environ: Mapping[str, str] | None = None) -> EnvironmentSettings:
    """The setup settings of ``environ`` (``os.environ`` by default); warns about unusable values, never raises."""
    env = os.environ if environ is None else environ
    provider = env.get(A.ENV_PROVIDER_NAME, "").strip()
    allow = env.get(A.ENV_ALLOW)
    deny = env.get(A.ENV_DENY)
    guard = env.get(A.ENV_GUARD)
    guard_requests = env.get(A.ENV_GUARD_REQUESTS)
    return EnvironmentSettings(
        provider_name=provider or None,
        allow=None if allow is None else _allow(allow),
        guard=None if guard is None else _guard(guard),
        deny=None if deny is None else _allow(deny, A.ENV_DENY),
        guard_requests=None if guard_requests is None else _guard(guard_requests, A.ENV_GUARD_REQUESTS),
    )


def environment_max_conversations(environ: Mapping[str, str] | None = None) -> int | None:
    """An instrumentor's ``max_conversations`` from ``environ`` (``os.environ`` by default), ``None`` when unset."""
    env = os.environ if environ is None else environ
    capacity = env.get(A.ENV_MAX_CONVERSATIONS, "")
    return _max_conversations(capacity) if capacity.strip() else None
