"""OpenTelemetry wiring: attribute names (GenAI semantic conventions as our own constants), redaction, spans.

Span content is redacted (`redact`) only when a user opted into it (``capture_content=True``), with the
rules of `guardrail.core.redaction` (re-exported here: `redact_value`, `redact_text`, `is_secret_key`),
then capped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from guardrail.core.redaction import REDACTED, _scan_head, is_secret_key, redact_text, redact_value

__all__ = [
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_CONVERSATION_ID",
    "GUARDRAIL_LAYER",
    "GUARDRAIL_HOOK",
    "GUARDRAIL_DECISION",
    "GUARDRAIL_FINDINGS",
    "GUARDRAIL_FINDING_COUNT",
    "GUARDRAIL_SCORE",
    "GUARDRAIL_STEP",
    "REDACTED",
    "TRACER_NAME",
    "get_tracer",
    "is_secret_key",
    "record_error",
    "redact",
    "redact_text",
    "redact_value",
]

# GenAI semantic-convention names, kept as our own constants so a convention rename is one edit.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"  # opt-in only
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"  # opt-in only
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"

GUARDRAIL_LAYER = "guardrail.core.layer"
GUARDRAIL_HOOK = "guardrail.hook"
GUARDRAIL_DECISION = "guardrail.decision"
GUARDRAIL_FINDINGS = "guardrail.findings"  # JSON list of {check, predicate, blocking, severity} (+ message: opt-in)
GUARDRAIL_FINDING_COUNT = "guardrail.finding_count"
GUARDRAIL_SCORE = "guardrail.score"
GUARDRAIL_STEP = "guardrail.step"
GUARDRAIL_MODE = "guardrail.mode"

TRACER_NAME = "guardrail"
DEFAULT_CONTENT_CAP = 2048
# How much of a long value is scanned: the cap plus room for what redaction removes (a private-key
# block shrinks to one marker), so whatever survives the final cut was scanned whole.
_SCAN_FACTOR = 4


def _dumps(value: Any) -> str:
    """A redacted structure as JSON text (keys sorted where they sort; a repr where JSON cannot hold it)."""
    for sort_keys in (True, False):
        try:
            return json.dumps(value, default=str, sort_keys=sort_keys)
        except (TypeError, ValueError, RecursionError):
            continue
    try:
        return repr(value)
    except Exception:
        return REDACTED


def redact(value: Any, cap: int = DEFAULT_CONTENT_CAP) -> str:
    """Render `value` for a span attribute: secrets masked, at most `cap` characters (plus a cut note).

    A text is redacted as `redact_text` does, anything else as `redact_value` does and then written as
    JSON; only the first ``4 * cap`` characters of content are scanned, the rest is cut, never kept.
    """
    limit = max(cap, 64) * _SCAN_FACTOR
    left_out = 0
    if isinstance(value, str):
        head, left_out = _scan_head(value, limit)
        text = redact_text(head)
    else:
        text = _dumps(redact_value(value, max_chars=limit))
    if len(text) > cap:
        cut = text[:cap]
        # never end inside a marker or on the first characters of a token the patterns could not see whole
        cut = cut[:cut.rfind(" ")] if " " in cut[-40:] else cut
        left_out += len(text) - len(cut)
        text = cut
    if left_out > 0:
        text += f"...[{left_out} chars cut]"
    return text


def record_error(span: trace.Span, exc: BaseException, *, capture_content: bool,
                 redactor: Callable[[str], str] = redact) -> None:
    """Put a failure on `span`: the exception type always, its message and traceback only with capture on
    (redacted), since an exception message often quotes the arguments or the file it choked on."""
    from opentelemetry.trace import Status, StatusCode

    name = type(exc).__name__
    if capture_content:
        import traceback

        trace_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        span.add_event("exception", {"exception.type": name, "exception.message": redactor(str(exc)),
                                     "exception.stacktrace": redactor(trace_text)})
        span.set_status(Status(StatusCode.ERROR, f"{name}: {redactor(str(exc))}"[:500]))
    else:
        span.add_event("exception", {"exception.type": name})
        span.set_status(Status(StatusCode.ERROR, name))


def get_tracer() -> trace.Tracer:
    """The guard's tracer from the global provider (a no-op one when none is configured)."""
    return trace.get_tracer(TRACER_NAME)
