"""A request's pairing on its response's span and counter, and the span of a request the provider refused
(docs/telemetry.md, "The request before it is sent").

The live integrations check each request with tool turns before it is sent
(:func:`etf_otel.protocols.check_request`). A broken one is recorded on the ``assemble_response`` span its
response gets (:func:`pairing_attributes`) and counted once per problem on ``etf.request.pairing_problems``
(:func:`count_pairing`). A request the provider refuses has no response: :func:`record_refused` gives it the
span its response would have had, ended with the error, so a refused follow-up is never without a trace. It
says whether the check predicted the refusal (``etf.request.pairing_refused``), or that a pairing refusal was
not predicted (``etf.request.pairing = "refused_unexplained"``). Only kinds, reasons and flags are recorded:
never the provider's message, which quotes ids and content.
"""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel.core._pairing_model import PairingCheck
from etf_otel.core._pairing_refusals import is_pairing_refusal
from etf_otel.instrumentation import _counters
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._span_attributes import bounded, pairing_attributes
from etf_otel.instrumentation._telemetry import Telemetry

__all__ = ["count_pairing", "pairing_attributes", "record_refused", "refusal_message"]


def count_pairing(telemetry: Telemetry, check: PairingCheck | None, base: dict[str, AttributeValue]) -> None:
    """One add per problem on ``etf.request.pairing_problems {problem, reason, provider}``."""
    if check is None or not check.problems:
        return
    provider = base.get(A.GEN_AI_PROVIDER_NAME)
    for problem in check.problems:
        telemetry.counters.add(_counters.REQUEST_PAIRING_PROBLEMS, (problem.kind.value, problem.reason.value, provider))


def refusal_message(error: BaseException) -> object:
    """The provider's own message in an SDK's error (``openai``/``anthropic``: ``.message`` or the body's
    ``error.message``; ``botocore``: ``response.Error.Message``; ``google-genai``: ``.message``), else ``str``."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        inner = response.get("Error")
        if isinstance(inner, dict) and isinstance(inner.get("Message"), str):
            return inner["Message"]
    message = getattr(error, "message", None)
    return message if isinstance(message, str) else str(error)


def record_refused(
    telemetry: Telemetry,
    error: BaseException,
    *,
    check: PairingCheck | None,
    provider_name: str | None,
    protocol: str | None,
    started_ns: int,
    parent: Context | None,
    provider_refused: bool = True,
) -> None:
    """The ``assemble_response`` span of a request that got no response, ended with ``error.type`` (the error's
    class): refused by the provider (``provider_refused``), or by the request guard before it was sent."""
    with internal_errors_swallowed("recording a refused request"):
        base = telemetry.base_attributes(provider_name)
        attributes: dict[str, AttributeValue] = {**base, A.ERROR_TYPE: bounded(type(error).__qualname__)}
        if protocol is not None:
            attributes[A.ETF_PROTOCOL] = protocol
        attributes.update(pairing_attributes(check))
        if provider_refused and check is not None and check.broken:
            attributes[A.ETF_REQUEST_PAIRING_REFUSED] = True
        elif provider_refused and is_pairing_refusal(refusal_message(error)):
            attributes[A.ETF_REQUEST_PAIRING] = A.PAIRING_REFUSED_UNEXPLAINED
        count_pairing(telemetry, check, base)
        span = telemetry.tracer.start_span(
            A.SPAN_ASSEMBLE_RESPONSE,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=started_ns,
        )
        span.set_status(Status(StatusCode.ERROR))
        span.end()
