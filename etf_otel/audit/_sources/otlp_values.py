"""OTLP/JSON values: ``AnyValue`` attributes, hex or base64 ids, times and status codes (``otlp_json``'s reader).

Hostile values are no crash: a number too large for 64 bits (``1e400``, ``Infinity``) is clamped or 0, a
malformed id is a ``ValueError`` the reader turns into a one-line reason.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

__all__ = ["decode_any_value", "decode_attributes", "decode_id", "status_code", "to_int"]

_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def decode_any_value(value: Any) -> object:
    """An OTLP/JSON ``AnyValue`` as a Python value (``None`` for an empty value)."""
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        if key in ("stringValue", "string_value"):
            return item
        if key in ("boolValue", "bool_value"):
            return bool(item)
        if key in ("intValue", "int_value"):
            try:
                return int(item)
            except (TypeError, ValueError):
                return None
        if key in ("doubleValue", "double_value"):
            try:
                return float(item)
            except (TypeError, ValueError):
                return None
        if key in ("arrayValue", "array_value"):
            values = item.get("values") if isinstance(item, dict) else None
            return [decode_any_value(v) for v in values] if isinstance(values, list) else []
        if key in ("kvlistValue", "kvlist_value"):
            values = item.get("values") if isinstance(item, dict) else None
            return decode_attributes(values)
        if key in ("bytesValue", "bytes_value"):
            return item
    return None


def decode_attributes(attributes: Any) -> dict[str, object]:
    out: dict[str, object] = {}
    if not isinstance(attributes, list):
        return out
    for entry in attributes:
        if isinstance(entry, dict):
            key = entry.get("key")
            if isinstance(key, str):
                out[key] = decode_any_value(entry.get("value"))
    return out


def decode_id(value: Any, size: int) -> str | None:
    """Hex id of ``size`` bytes; ``None`` if absent, empty or all zeros; raises if malformed."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if len(value) == 2 * size:
            try:
                int(value, 16)
            except ValueError:
                pass
            else:
                text = value.lower()
                return None if text.strip("0") == "" else text
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == size:
            return None if raw == bytes(size) else raw.hex()
    raise ValueError(f"malformed {'trace' if size == 16 else 'span'} id {str(value)[:40]!r}")


_MAX_INT64 = 2**63 - 1


def to_int(value: Any) -> int:
    """A time or code as an integer: 0 if it is not one, clamped to OTLP's 64 bits (``1e400`` is no crash)."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(-_MAX_INT64 - 1, min(number, _MAX_INT64))


def status_code(status: Any) -> int:
    if not isinstance(status, dict):
        return 0
    code = status.get("code")
    if isinstance(code, str):
        return _STATUS_CODES.get(code, to_int(code))
    return to_int(code)
