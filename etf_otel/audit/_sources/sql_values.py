"""Attribute values as the Collector's ClickHouse exporter stores them, and as UTF-8 can hold them (``sql``)."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from etf_otel import attributes as A

__all__ = ["any_string", "clean", "positional", "string_map"]


def any_string(value: object) -> str:
    """An attribute value as the exporter stores it (``pcommon.Value.AsString``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return format(Decimal(text), "f") if "e" in text else text.removesuffix(".0")
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), sort_keys=isinstance(value, dict))


_COUNT = re.compile("[1-9][0-9]*")


def positional(attributes: dict[str, object]) -> bool:
    """Whether a call span says its position is its identity (Gemini without ids, docs/cli.md#calls-without-ids-gemini):
    ``etf.id.positional`` a positive integer as the exporter stores it, as ``sql/audit_findings.sql`` reads it."""
    return _COUNT.fullmatch(any_string(attributes.get(A.ETF_ID_POSITIONAL))) is not None


def string_map(attributes: dict[str, object]) -> dict[str, str]:
    return {key: any_string(value) for key, value in attributes.items()}


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    """``value`` as UTF-8 can hold it: a lone surrogate (valid JSON, not text) becomes U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", value)


def clean(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {_text(key): clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clean(item) for item in value]
    return value
