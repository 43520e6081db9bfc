"""OpenTelemetry wiring: attribute names (GenAI semantic conventions as our own constants), redaction, spans.

Redaction (`redact`) runs only on content a user opted into (``capture_content=True``). It masks
what detect-secrets' detector plugins recognise (cloud and SaaS keys, JWTs, private keys,
credentials in URLs, secret-named assignments, high-entropy quoted strings) plus key-name rules
of our own: a value under a secret-sounding key (``password``, ``passphrase``, ``credentials``,
``private_key``, ``*_token`` ...) in a mapping, an assignment, a header or a command-line flag is
masked whole, and a private-key block is masked to its END line or, when that is cut off, to the
end of the text. detect-secrets is imported on the first redaction, so a guard that captures no
content never pays for it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
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
    "REDACTED",
    "TRACER_NAME",
    "get_tracer",
    "record_error",
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
GUARDRAIL_FINDINGS = "guardrail.findings"  # JSON list of {check, predicate, blocking, severity} (+ message: opt-in)
GUARDRAIL_FINDING_COUNT = "guardrail.finding_count"
GUARDRAIL_SCORE = "guardrail.score"
GUARDRAIL_STEP = "guardrail.step"
GUARDRAIL_MODE = "guardrail.mode"

TRACER_NAME = "guardrail"
REDACTED = "[REDACTED]"
DEFAULT_CONTENT_CAP = 2048
# How much of a long text is scanned: the cap plus room for what redaction removes (a private-key
# block shrinks to one marker), so whatever survives the final cut was scanned whole.
_SCAN_FACTOR = 4
_MAX_DEPTH = 64  # deeper structure is rendered as a marker, never walked

# ------------------------------------------------------------------ key-name rules (ours)
# A key whose value is a secret whatever it looks like. Substrings, so ``db_password``,
# ``AWS_SECRET_ACCESS_KEY``, ``client_secret``, ``x-api-key`` and ``sshPassphrase`` all match.
_SECRET_KEY = (r"(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
               r"private[_-]?key|priv[_-]?key|client[_-]?key|signing[_-]?key|credentials?|authorization|"
               r"cookie|session[_-]?id|dsn)")
_SECRET_KEY_NAME = re.compile(rf"[\w.-]*{_SECRET_KEY}[\w.-]*", re.IGNORECASE)
# ``password: two words`` / ``aws_secret_access_key = X`` / ``"token": "X"`` / ``Authorization: Basic X``:
# the key, an assignment, then a quoted value or the rest of the line.
_ASSIGNED = re.compile(
    rf"""(?<![\w.-])(?P<key>[\w.-]*?{_SECRET_KEY}[\w.-]*)["']?[ \t]*(?::=|=>|[:=])[ \t]*"""
    r"""(?:(?P<q>["'`])(?P<quoted>(?:(?!(?P=q))[^\\\n]|\\.){1,4096})(?P=q)|(?P<rest>[^\n]{1,4096}))""",
    re.IGNORECASE,
)
# ``--password SECRET`` / ``--api-key=SECRET`` / ``-token SECRET``.
_FLAG = re.compile(rf"(?<![\w-])--?[\w-]*{_SECRET_KEY}[\w-]*(?:=|[ \t]+)(?P<value>[^\s'\"]+|'[^']*'|\"[^\"]*\")",
                   re.IGNORECASE)
# MySQL-family clients take the password glued to -p (``mysql -uroot -pSECRET``); curl takes ``-u user:pw``.
_MYSQL_P = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mariadb)\b[^\n;|&]{0,1024}?"
                      r"(?<=\s)(?:-p|--password=)(?P<value>[^\s'\"]+)")
_CURL_USER = re.compile(r"(?<=\s)(?:-u|--user)[ \t]+['\"]?[^\s:'\"]+:(?P<value>[^\s'\"]+)")
# ``Bearer X`` / ``Basic X`` outside a header line too (a Basic or Digest value must look encoded: a digit or
# base64 padding, so "basic installation" stays).
_AUTH_SCHEME = re.compile(r"\b(?:bearer[ \t]+|(?:basic|digest)[ \t]+(?=[A-Za-z0-9._~+/=-]*[0-9+/=]))"
                          r"(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# Shapes detect-secrets 1.5 does not know (or knows only at one length).
_TOKEN_SHAPES = re.compile(
    r"(?=[gsrpAhxe])"  # every shape starts with one of these: other positions fail at once
    r"(?:github_pat_[A-Za-z0-9_]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bsk-[A-Za-z0-9_-]{8,}"
    r"|\b[rsp]k_(?:live|test)_[A-Za-z0-9]{8,}"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\bhf_[A-Za-z0-9]{30,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"
)
_PRIVATE_KEY_END = re.compile(r"-----END[^\n]*?-----|\Z")

# ------------------------------------------------------------------ detect-secrets (loaded on first use)
_DETECTORS: tuple[list[Any], Any, list[Any], list[re.Pattern[str]]] | None = None
# Words every keyword-plugin pattern needs (detect-secrets' DENYLIST, loosened): a line without one is skipped.
_KEYWORD_HINT = re.compile(r"key|pass|pwd|secret|contrase", re.IGNORECASE)
_DETECTORS_LOCK = threading.Lock()

# detect-secrets' regex plugins we run (IP addresses are not secrets; the Keyword and entropy
# plugins are driven separately below).
_REGEX_PLUGINS = (
    "artifactory.ArtifactoryDetector", "aws.AWSKeyDetector", "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector", "cloudant.CloudantDetector", "discord.DiscordBotTokenDetector",
    "github_token.GitHubTokenDetector", "gitlab_token.GitLabTokenDetector", "ibm_cloud_iam.IbmCloudIamDetector",
    "ibm_cos_hmac.IbmCosHmacDetector", "jwt.JwtTokenDetector", "mailchimp.MailchimpDetector", "npm.NpmDetector",
    "openai.OpenAIDetector", "pypi_token.PypiTokenDetector", "sendgrid.SendGridDetector", "slack.SlackDetector",
    "softlayer.SoftlayerDetector", "square_oauth.SquareOAuthDetector", "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector", "twilio.TwilioKeyDetector",
)


def _detectors() -> tuple[list[Any], Any, list[Any], list[re.Pattern[str]]]:
    """detect-secrets' plugins: (regex detectors, keyword detector, entropy detectors, private-key markers).

    The plugin classes are imported by name: detect-secrets' own plugin discovery also loads
    plugins named in a settings file, which must never run here.
    """
    global _DETECTORS
    with _DETECTORS_LOCK:
        if _DETECTORS is None:
            import importlib

            from detect_secrets.plugins.high_entropy_strings import (
                Base64HighEntropyString,
                HexHighEntropyString,
            )
            from detect_secrets.plugins.keyword import KeywordDetector
            from detect_secrets.plugins.private_key import PrivateKeyDetector

            regex: list[Any] = []
            for dotted in _REGEX_PLUGINS:
                module, name = dotted.rsplit(".", 1)
                try:
                    regex.append(getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)())
                except (ImportError, AttributeError):  # a plugin renamed in another release: the rest still run
                    continue
            entropy = [Base64HighEntropyString(), HexHighEntropyString()]
            _DETECTORS = (regex, _KeywordEverywhere(KeywordDetector()), entropy, list(PrivateKeyDetector.denylist))
        return _DETECTORS


class _KeywordEverywhere:
    """detect-secrets' keyword plugin with every file type's patterns (a span has no file type)."""

    def __init__(self, plugin: Any) -> None:
        from detect_secrets.plugins import keyword

        self.plugin = plugin
        self.tables = [keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP, keyword.CONFIG_DENYLIST_REGEX_TO_GROUP,
                       keyword.GOLANG_DENYLIST_REGEX_TO_GROUP, keyword.COMMON_C_DENYLIST_REGEX_TO_GROUP,
                       keyword.C_PLUS_PLUS_REGEX_TO_GROUP]

    def analyze_string(self, string: str) -> Iterable[str]:
        for table in self.tables:
            yield from self.plugin.analyze_string(string, denylist_regex_to_group=table)


# ------------------------------------------------------------------ redaction
def _mask_structure(value: Any, depth: int = 0) -> Any:
    """A copy of `value` with every value under a secret-named key replaced whole (lists and dicts walked)."""
    if depth > _MAX_DEPTH:
        return "[nested too deep]"
    if isinstance(value, Mapping):
        return {str(k): REDACTED if _SECRET_KEY_NAME.fullmatch(str(k)) and v not in (None, "", {}, [])
                else _mask_structure(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_structure(v, depth + 1) for v in value]
    return value


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(_mask_structure(value), sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):  # unsortable keys, circular: a repr still gets redacted
        return repr(value)


def _mask_private_keys(text: str, markers: list[re.Pattern[str]]) -> str:
    """Every private-key block, from its BEGIN line to its END line or, when the END is cut off, to the end."""
    for marker in markers:
        while (found := marker.search(text)) is not None:
            start = found.start() - 5 if text[max(0, found.start() - 5):found.start()] == "-----" else found.start()
            end = _PRIVATE_KEY_END.search(text, found.end())
            stop = end.end() if end is not None else len(text)
            text = text[:start] + REDACTED + text[stop:]
    return text


def _sub_group(pattern: re.Pattern[str], group: str, text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        begin, end = match.span(group)
        if begin < 0:
            return match.group(0)
        whole = match.start()
        return match.group(0)[:begin - whole] + REDACTED + match.group(0)[end - whole:]
    return pattern.sub(mask, text)


def _assigned(match: re.Match[str]) -> str:
    for group in ("quoted", "rest"):
        begin, end = match.span(group)
        if begin >= 0:
            value = match.group(group)
            if value.startswith(REDACTED) or not value.strip():
                return match.group(0)
            whole = match.start()
            return match.group(0)[:begin - whole] + REDACTED + match.group(0)[end - whole:]
    return match.group(0)


def _found_values(text: str, regex: list[Any], keyword: Any, entropy: list[Any]) -> set[str]:
    """The secret values detect-secrets' plugins report in `text`.

    The regex and entropy plugins match within a line, so they scan the whole text at once; the
    keyword plugin reports one match per pattern, so it reads line by line, and only the lines
    that name a secret keyword at all (its patterns are the costly ones).
    """
    values: set[str] = set()
    for plugin in regex:
        values.update(v for v in plugin.analyze_string(text) if isinstance(v, str))
    for plugin in entropy:
        values.update(v for v in plugin.analyze_string(text)
                      if isinstance(v, str) and plugin.calculate_shannon_entropy(v) > plugin.entropy_limit)
    for line in text.splitlines():
        if _KEYWORD_HINT.search(line):
            values.update(v for v in keyword.analyze_string(line) if isinstance(v, str))
    return {v for v in values if len(v) >= 4 and REDACTED not in v}


def redact_text(text: str) -> str:
    """`text` with every secret detect-secrets or our key-name rules find replaced by ``[REDACTED]``."""
    regex, keyword, entropy, markers = _detectors()
    text = _mask_private_keys(text, markers)
    text = _ASSIGNED.sub(_assigned, text)
    for pattern in (_FLAG, _MYSQL_P, _CURL_USER, _AUTH_SCHEME):
        text = _sub_group(pattern, "value", text)
    for value in sorted(_found_values(text, regex, keyword, entropy), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return _TOKEN_SHAPES.sub(REDACTED, text)


def _scan_window(text: str, cap: int) -> str:
    """The head of a long text that redaction scans, ending at a whitespace so no secret is cut in half."""
    limit = max(cap, 64) * _SCAN_FACTOR
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(c) for c in " \n\t,;")
    return head[:cut] if cut > 0 else ""


def redact(value: Any, cap: int = DEFAULT_CONTENT_CAP) -> str:
    """Render `value` for a span attribute: secrets masked, at most `cap` characters (plus a cut note)."""
    text = _render(value)
    total = len(text)
    scanned = _scan_window(text, cap)
    text = redact_text(scanned)
    left_out = total - len(scanned)
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
