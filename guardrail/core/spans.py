"""OpenTelemetry wiring: attribute names (GenAI semantic conventions as our own constants), redaction, spans."""

from __future__ import annotations

import json
import re
from typing import Any

from opentelemetry import trace

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
    "TRACER_NAME",
    "get_tracer",
    "redact",
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
GUARDRAIL_FINDINGS = "guardrail.findings"  # JSON list of {check, message, blocking}
GUARDRAIL_FINDING_COUNT = "guardrail.finding_count"
GUARDRAIL_SCORE = "guardrail.score"
GUARDRAIL_STEP = "guardrail.step"
GUARDRAIL_MODE = "guardrail.mode"

TRACER_NAME = "guardrail"

# Common secret shapes: API keys, bearer tokens, AWS keys, private key blocks, key=value secrets.
_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"(?i)bearer\s+[A-Za-z0-9._\-]{12,}"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"xox[abpr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"(?i)((?:api[_-]?key|secret|password|passwd|token)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{4,}"),
]
DEFAULT_CONTENT_CAP = 2048


def redact(value: Any, cap: int = DEFAULT_CONTENT_CAP) -> str:
    """Render `value` for a span attribute: secrets masked, at most `cap` characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[REDACTED]", text)
        else:
            text = pattern.sub("[REDACTED]", text)
    if len(text) > cap:
        text = text[:cap] + f"...[{len(text) - cap} chars cut]"
    return text


def get_tracer() -> trace.Tracer:
    """The guard's tracer from the global provider (a no-op one when none is configured)."""
    return trace.get_tracer(TRACER_NAME)
