"""Secret redaction for whatever the guard keeps (span attributes, recorded runs): text and any JSON-able value.

`redact_value(obj)` returns `obj` with the same structure and every secret replaced by ``[REDACTED]``;
`redact_text(text)` does the same for one text. Both are structure-aware:

- a value under a secret-named key is masked whole: in a mapping (``password``, ``client_secret``,
  ``X-Api-Key``, ``aws_secret_access_key``, ``refreshToken``, ``private_key_id`` ...; not ``max_tokens``,
  ``token_count``, ``secret_name``, ``primary_key``), in a name/value pair (``{"name": "DB_PASSWORD",
  "value": ...}``, ``["X-Vault-Token", ...]``, ``<add key=... value=...>``), an assignment, a header, an
  XML element, a ``--flag`` (also as the next item of an argv list); a value that only refers to a secret
  (``os.environ["API_KEY"]``, ``${DB_PASSWORD}``) stays;
- a structure written inside a string (JSON in a tool result or a config value, ``curl -d '{...}'``,
  ``curl -d "{\\"password\\": ...}"``, the ``str()`` of a Python dict) is parsed and walked the same way,
  recursively, within the same depth bound; the masked text keeps the agent's own layout where the
  masked leaves can be written back in place;
- then detect-secrets' regex detectors (cloud and SaaS keys, JWTs, credentials in URLs) and its
  base64-entropy detector on quoted strings, and shapes of our own (private-key blocks, base64-encoded
  ones, tokens detect-secrets 1.5 lacks);
- a secret masked once is masked wherever else it appears in the same call.

It is bounded: at most `max_chars` characters of string content are scanned per call (what lies past
that is cut with a note, never kept unscanned), nesting past `max_depth` is masked whole, the search for
structures in a string is capped; every pattern runs in time linear in its input. It never raises: what
cannot be read is masked whole. detect-secrets is imported on the first redaction, so a guard that keeps
no content never pays for it.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_SCAN_CHARS", "REDACTED", "SECRET_KEY_WORDS", "is_secret_key", "redact_text",
           "redact_value"]

REDACTED = "[REDACTED]"
MAX_DEPTH = 32  # containers and JSON-in-strings together; deeper is masked whole
MAX_SCAN_CHARS = 1 << 18  # string content scanned per call; the rest is cut with a note
_JSON_TRIES = 32  # JSON parse attempts per string
_JSON_WORK = 4  # a string's JSON parse attempts may read at most this many times its length
_KNOWN_MIN = 8  # a masked value this long is masked wherever else it appears in the same call
_KEY_MAX = 64  # characters of a key name on each side of its secret word

# ------------------------------------------------------------------ key names
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# A word that makes its key secret whatever the value looks like.
_SECRET_WORDS = frozenset({
    "password", "passwd", "passphrase", "pwd", "secret", "secrets", "token", "credential", "credentials", "creds",
    "authorization", "cookie", "cookies", "bearer", "sig", "apikey", "privatekey", "jwt", "contrasena",
    "contraseña"})
# The same run together (``PGPASSWORD``, ``authToken`` written ``AUTHTOKEN``, ``xApiKey`` lowered).
_SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "apikey", "accesskey", "secretkey", "privatekey",
                   "accountkey", "credentials")
_TOKEN_PREFIXES = frozenset({
    "auth", "access", "refresh", "id", "api", "bearer", "session", "csrf", "xsrf", "oauth", "secret", "private",
    "personal", "bot", "app", "user", "client", "github", "gh", "gitlab", "slack", "npm", "pypi", "hf", "service",
    "security", "device", "push", "vault", "consul", "registry", "deploy", "my"})
# Words that may follow the secret word in a key that still holds the secret.
_SECRET_SUFFIXES = frozenset({
    "value", "val", "id", "hash", "hashed", "b64", "base64", "raw", "str", "string", "data", "plain", "plaintext",
    "text", "bytes", "hex", "enc", "encrypted", "key", "secret", "token", "pem", "der", "json", "old", "new",
    "current", "prev", "previous", "next", "primary", "secondary", "prod", "production", "dev", "staging", "test",
    "live", "confirmation", "confirm", "again", "repeat", "override", "local", "remote", "admin", "root", "user"})
# ``<kind> key`` names a secret key; ``primary key``, ``sort key``, ``public key`` do not.
_KEY_KINDS = frozenset({
    "api", "access", "secret", "private", "priv", "signing", "sign", "client", "encryption", "encrypt", "master",
    "account", "shared", "auth", "ssh", "app", "consumer", "subscription", "license", "storage", "service",
    "webhook", "hmac", "deploy", "admin", "root", "tls", "ssl", "gpg", "pgp", "aes", "session", "crypto",
    "decryption", "secure"})
_SIGNATURE_CONTEXT = frozenset({"amz", "goog", "sas", "hmac", "webhook", "oauth", "url", "request"})
# A last word that makes the key about a secret rather than the secret: ``token_count``, ``secret_name``,
# ``password_file``, ``token_uri``, ``auth_method``.
_NOT_SECRET_LAST = frozenset({
    "count", "counts", "type", "types", "kind", "usage", "limit", "limits", "length", "len", "size", "max", "min",
    "budget", "total", "num", "number", "index", "idx", "url", "uri", "urls", "endpoint", "endpoints", "file",
    "files", "path", "paths", "filename", "dir", "directory", "name", "names", "format", "expiry", "expires",
    "expiration", "ttl", "lifetime", "enabled", "disabled", "required", "policy", "rotation", "ref", "label",
    "field", "prompt", "placeholder", "provider", "method", "mode", "scope", "scopes", "stdin", "env", "version",
    "algorithm", "alg", "location", "source", "store", "manager", "reset", "changed", "set", "updated", "created",
    "strength", "rules", "pattern", "regex", "hint"})
# Weak words count only as the last word and only for text values: ``{"auth": "dXNl..."}``, ``DB_PASS=...``,
# but not ``{"pass": 12, "fail": 0}`` or ``auth_method``.
_WEAK_LAST = frozenset({"auth", "pass", "dsn"})


@functools.lru_cache(maxsize=4096)
def _secret_strength(name: str) -> int:
    """2: any value under `name` is a secret; 1: a text value is; 0: `name` does not name a secret."""
    if not name or len(name) > 2 * _KEY_MAX + 16:
        return 0
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in _NOT_SECRET_LAST:
        return 0
    # the secret word names what the key holds only where nothing but a suffix follows it: ``password_hash``,
    # ``private_key_id``, ``API_KEY_PROD`` hold a secret, ``token_logprobs`` and ``cancellation_token_source`` do not
    tail = len(words)
    while tail > 0 and (words[tail - 1] in _SECRET_SUFFIXES or words[tail - 1].isdigit()):
        tail -= 1
    for i in range(max(0, tail - 1), len(words)):
        word = words[i]
        if word in _SECRET_WORDS or _run_together(word):
            return 2
        if word == "key" and i > 0 and words[i - 1] in _KEY_KINDS:
            return 2
        if word == "signature" and _SIGNATURE_CONTEXT.intersection(words):
            return 2
    return 1 if words[-1] in _WEAK_LAST else 0


def _run_together(word: str) -> bool:
    """``pgpassword``, ``xapikey``, ``authtoken``: a secret word run together with what it belongs to (``tiktoken``
    is a tokenizer: a run-together ``token`` needs a prefix that names a credential)."""
    if word.endswith("token"):
        return word[:-5] in _TOKEN_PREFIXES
    return word.endswith(_SECRET_ENDINGS)


def is_secret_key(name: str) -> bool:
    """Whether a value under the key, header, flag or variable `name` is treated as a secret."""
    return _secret_strength(name) > 0


def _names_secret(value: Any) -> bool:
    """Whether `value` is a secret's name written as data (``{"name": "DB_PASSWORD", ...}``): one word."""
    return isinstance(value, str) and 0 < len(value) <= _KEY_MAX and not any(c.isspace() for c in value) \
        and _secret_strength(value) > 0


def _maskable(value: Any, strength: int) -> bool:
    """Whether `value` under a key of `strength` is masked (nothing to hide in None, booleans or empties)."""
    if value is None or isinstance(value, bool) or value == REDACTED:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if strength < 2:  # a weak key: a text, or texts (``"auth": ("admin", "pw")``), never numbers or mappings
        return isinstance(value, list | tuple) and 0 < len(value) <= 2 and all(isinstance(v, str) for v in value)
    if isinstance(value, Mapping | list | tuple):
        return len(value) > 0
    return True


# ------------------------------------------------------------------ text rules (ours)
_KEY_HINT = re.compile(r"pass|pwd|secret|token|key|cred|auth|cookie|dsn|sig|bearer|jwt|contras", re.IGNORECASE)
SECRET_KEY_WORDS = tuple(_KEY_HINT.pattern.split("|"))  # what names a secret in a text's key, flag or element
_KEY_CHARS = re.compile(r"[\w.-]*")
# After a key: an optional closing quote (escaped too) or ``[]``, then ``:``, ``=``, ``:=``, ``=>``, ``==``, ``!=``.
_ASSIGN_OP = re.compile(r"""(?:\\?["'])?(?:\[\])?[ \t]*(?::=|=>|===?|!==?|[:=])[ \t]*""")
# The value: an escaped-quoted, quoted, or bare value (to the line's end, a quote or an escape; within a
# URL query or a ``;``-separated connection string, to the next separator).
_VALUE = re.compile(r"""\\"(?P<esc>(?:(?!\\")[^\n]){1,4096})\\"|(?:[rRbBfFuU]{1,2}(?=["']))?(?P<q>["'`])(?P<quoted>(?:(?!(?P=q))[^\\\n]|\\.){1,4096})(?P=q)"""
                    r"""|(?P<rest>(?:[^\n"\\]|\\(?![nrt"\\])){1,4096})""")
_VALUE_IN_QUERY = re.compile(r"[^\s&#;\"'<>]{1,4096}")
_FLAG = re.compile(rf"(?<![\w-])--?(?P<flag>[\w-]{{0,{_KEY_MAX}}}?(?:{_KEY_HINT.pattern})[\w-]{{0,{_KEY_MAX}}})"
                   r"(?:=|[ \t]+)(?P<value>[^\s'\"]+|'[^'\n]{0,4096}'|\"[^\"\n]{0,4096}\")", re.IGNORECASE)
_FLAG_WORD = re.compile(r"--?(?P<flag>[\w-]{1,128})")
_XML_ELEMENT = re.compile(r"<(?P<tag>[\w.:-]{1,64})(?:\s[^<>]{0,256})?>(?P<value>[^<\n]{1,4096})</(?P=tag)>")
_XML_PAIR = re.compile(r"""\b(?:key|name)\s*=\s*(?P<q>["'])(?P<name>[^"'<>\n]{1,128})(?P=q)\s+value\s*=\s*"""
                       r"""(?P<vq>["'])(?P<value>[^"'\n]{1,4096})(?P=vq)""", re.IGNORECASE)
# ``scheme://user:password@host`` (the user may be empty: ``redis://:pw@``); the password runs to the last
# ``@`` before the host, so an unencoded ``@`` in it is masked too.
_URL_CREDENTIALS = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@'\"<>]{0,256}:(?P<value>[^\s/'\"<>]{1,1024})@")
# Commands that take a password glued to or after a short option.
_MYSQL_P = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mariadb)\b[^\n;|&]{0,1024}?"
                      r"(?<=\s)(?:-p|--password=)(?P<value>[^\s'\"]+)")
_SHORT_PASSWORD = re.compile(r"\b(?:sshpass|redis-cli|(?:docker|podman|buildah|skopeo|helm\s+registry)\s+login|az\s+login)"
                             r"\b[^\n;|&]{0,1024}?(?<=\s)-[pa][ \t]+(?P<value>[^\s'\"]+)")
_CURL_USER = re.compile(r"(?<=\s)(?:-u|--user)[ \t]+['\"]?[^\s:'\"]+:(?P<value>[^\s'\"]+)")
_NETRC_PASSWORD = re.compile(r"(?<![\w-])(?:password|passwd)[ \t]+(?P<value>\S+)")
# ``Bearer X`` / ``Basic X`` outside a header line too (a Basic or Digest value must look encoded: a digit or
# base64 padding, so "basic installation" stays).
_AUTH_SCHEME = re.compile(r"\b(?:bearer[ \t]+|(?:basic|digest)[ \t]+(?=[A-Za-z0-9._~+/=-]*[0-9+/=]))"
                          r"(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# Shapes detect-secrets 1.5 does not know (or knows only at one length).
_TOKEN_SHAPES = re.compile(
    r"(?=[gsrpAhxenGy])"  # every shape starts with one of these: other positions fail at once
    r"(?:github_pat_[A-Za-z0-9_]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bglpat-[A-Za-z0-9_-]{20,}"
    r"|\bsk-[A-Za-z0-9_-]{8,}"
    r"|\b[rsp]k_(?:live|test)_[A-Za-z0-9]{8,}"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\bGOCSPX-[0-9A-Za-z_-]{20,}"
    r"|\bya29\.[0-9A-Za-z_-]{20,}"
    r"|\bhf_[A-Za-z0-9]{30,}"
    r"|\bnpm_[A-Za-z0-9]{30,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    # a JWT, also cut short after its claims' first characters (a truncated tool output)
    r"|\beyJ[A-Za-z0-9_-]{8,}\.(?:eyJ|[A-Za-z0-9_-]{8,}\.)[A-Za-z0-9_.-]*)"
)
_PRIVATE_KEY_BEGIN = re.compile(r"(?:-----)?BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?|PuTTY-User-Key-File-\d")
_PRIVATE_KEY_END = re.compile(r"-----END[^\n]{0,80}?-----|\Z")
# A private-key block base64-encoded whole (a Kubernetes secret's ``tls.key``): the encodings of its first line.
_B64_PRIVATE_KEY = re.compile("(?:" + "|".join(
    re.escape(base64.b64encode(head[:len(head) // 3 * 3].encode()).decode())
    for head in (f"-----BEGIN {kind}PRIVATE KEY" for kind in ("", "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED "))
) + ")[A-Za-z0-9+/=]*")
# The case-insensitive patterns, case-sensitive, for text lowered first (`_sub_value`).
_CASED = {pattern: re.compile(pattern.pattern, pattern.flags & ~re.IGNORECASE)
          for pattern in (_KEY_HINT, _FLAG, _XML_PAIR, _AUTH_SCHEME)}
# A run detect-secrets' regex plugins could match needs ten token characters in a row.
_LONG_RUN = re.compile(r"[A-Za-z0-9+/=_-]{10,}")
_SHELL_DQ_JSON = re.compile(r'"(?P<body>[\[{]\s*\\"(?:[^"\\\n]|\\.){0,65536})"')
# Where a structure may start: JSON's ``{"`` / ``["`` / ``[{``, a Python literal's ``{'`` / ``['`` / ``[(``.
_STRUCTURE_START = re.compile(r"""\{(?=\s*")|\[(?=\s*[\[{"])|(?P<python>[\[{](?=\s*')|\[(?=\s*\()|\((?=\s*'))""")
_DECODER = json.JSONDecoder(strict=False)

# ------------------------------------------------------------------ detect-secrets (loaded on first use)
_DETECTORS: tuple[list[Any], Any] | None = None
_DETECTORS_LOCK = threading.Lock()

# detect-secrets' regex plugins we run, and its base64-entropy plugin. Left out: IP addresses (not secrets);
# the hex-entropy plugin (commit hashes, content digests, trace and request ids are hex; a hex secret under
# a secret-named key is masked by the key rules); the keyword plugin, whose patterns backtrack worse than
# quadratically on a long line of keywords (2 s on a 2 KB line of ``passwordpassword...``): the assignment
# rules above cover its forms (``=``, ``:``, ``:=``, ``=>``, ``==``, ``!=``, quoted or bare) in linear time.
_REGEX_PLUGINS = (
    "artifactory.ArtifactoryDetector", "aws.AWSKeyDetector", "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector", "cloudant.CloudantDetector", "discord.DiscordBotTokenDetector",
    "github_token.GitHubTokenDetector", "gitlab_token.GitLabTokenDetector", "ibm_cloud_iam.IbmCloudIamDetector",
    "ibm_cos_hmac.IbmCosHmacDetector", "jwt.JwtTokenDetector", "mailchimp.MailchimpDetector", "npm.NpmDetector",
    "openai.OpenAIDetector", "pypi_token.PypiTokenDetector", "sendgrid.SendGridDetector", "slack.SlackDetector",
    "softlayer.SoftlayerDetector", "square_oauth.SquareOAuthDetector", "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector", "twilio.TwilioKeyDetector",
)


# What a plugin's patterns need before they can match at all, for the plugins whose patterns try every
# position of a text (keyword lookbehinds, optional prefixes) and cost 0.2-0.5 us a character: a text
# without it is not given to them.
_PLUGIN_GATES = {  # matched against the text lowered
    # its key names may be a bare ``api_key``, which the assignment rules mask already
    "IbmCloudIamDetector": re.compile(r"ibm|iam|cloud"),
    "IbmCosHmacDetector": re.compile(r"[a-f0-9]{48}"),
    "CloudantDetector": re.compile(r"cl(?:oudant|ou)?[_-]?(?:api)?(?:key|pwd|pw|pass|token)|cloudant\.com"),
    "SoftlayerDetector": re.compile(r"(?:softlayer|sl)[_-]?(?:api)?[_-]?(?:key|pwd|pass|token)|softlayer\.com"),
    "ArtifactoryDetector": re.compile(r"akc|ap[\da-f]"),
    "TelegramBotTokenDetector": re.compile(r"\d{8,10}:"),
    "AWSKeyDetector": re.compile(r"aws|a3t|abia|acca|akia|asia"),
    "MailchimpDetector": re.compile(r"-us\d"),
}


def _detectors() -> tuple[list[Any], Any]:
    """detect-secrets' plugins: (regex detectors, base64-entropy detector).

    The plugin classes are imported by name: detect-secrets' own plugin discovery also loads plugins
    named in a settings file, which must never run here.
    """
    global _DETECTORS
    with _DETECTORS_LOCK:
        if _DETECTORS is None:
            import importlib

            from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

            regex: list[Any] = []
            for dotted in _REGEX_PLUGINS:
                module, name = dotted.rsplit(".", 1)
                try:
                    regex.append(getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)())
                except (ImportError, AttributeError):  # a plugin renamed in another release: the rest still run
                    continue
            _DETECTORS = (regex, Base64HighEntropyString())
        return _DETECTORS


def _found_values(text: str, quoted: bool) -> set[str]:
    """The secret values detect-secrets' plugins report in `text` (a value of a structure when `quoted`).

    Every pattern needs a run of ten token characters, so a text without one is not scanned. The entropy
    plugin reads quoted strings only, as detect-secrets does; a value of a structure is a quoted string in
    its JSON form, so it is read quoted.
    """
    values: set[str] = set()
    if _LONG_RUN.search(text):
        regex, entropy = _detectors()
        low = text.lower()
        for plugin in regex:
            gate = _PLUGIN_GATES.get(type(plugin).__name__)
            if gate is None or gate.search(low) is not None:
                values.update(v for v in plugin.analyze_string(text) if isinstance(v, str))
        scanned = f'"{text}"' if quoted else text
        values.update(v for v in entropy.analyze_string(scanned)
                      if isinstance(v, str) and entropy.calculate_shannon_entropy(v) > entropy.entropy_limit)
    return {v for v in values if len(v) >= 4 and REDACTED not in v}


_TOKEN_TAIL = re.compile(r"[A-Za-z0-9+/=_.~-]*")
_TOKEN_HEAD = re.compile(r"[A-Za-z0-9+/=_-]*")


def _mask_found(text: str, values: set[str]) -> str:
    """`text` with each found value masked together with the token characters around it: a plugin that
    matches a token's start (detect-secrets' JWT pattern stops before the signature) leaves nothing behind."""
    for value in sorted(values, key=len, reverse=True):
        spans: list[tuple[int, int]] = []
        pos = 0
        while (at := text.find(value, pos)) >= 0:
            tail = _TOKEN_TAIL.match(text, at + len(value))
            stop = tail.end() if tail is not None else at + len(value)
            while stop > at + len(value) and text[stop - 1] == ".":
                stop -= 1  # a sentence's full stop is not part of the token
            head = _TOKEN_HEAD.match(text[max(0, at - 256):at][::-1])
            spans.append((at - (head.end() if head is not None else 0), stop))
            pos = stop
        text = _splice(text, spans)
    return text


# ------------------------------------------------------------------ the walk
class _Budget:
    """One call's state: characters of string content it may still scan, how deep it may go, and the
    secrets it has masked so far (masked again wherever else they appear: ``if x == "pw" or password == "pw"``)."""

    __slots__ = ("chars", "known", "max_depth")

    def __init__(self, chars: float, max_depth: int, known: set[str] | None = None) -> None:
        self.chars = chars
        self.max_depth = max_depth
        self.known: set[str] = set() if known is None else known


def _splice(text: str, spans: list[tuple[int, int]], known: set[str] | None = None) -> str:
    """`text` with each (start, end) span, in order and not overlapping, replaced by the marker (each masked
    value remembered in `known`)."""
    if not spans:
        return text
    out: list[str] = []
    last = 0
    for start, end in spans:
        if known is not None:
            _remember(text[start:end], known)
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


def _sub_value(pattern: re.Pattern[str], text: str, known: set[str], folded: str | None = None,
               name: str | None = None) -> str:
    """`text` with every match's ``value`` group masked (where the match's `name` group names a secret).

    A case-insensitive pattern is run case-sensitively on `folded` (the text lowered, same length) where
    given: Python's regex engine skips ahead by literal prefixes only when case matters, ten times faster.
    """
    spans = []
    matches = _CASED[pattern].finditer(folded) if folded is not None and pattern in _CASED else pattern.finditer(text)
    for match in matches:
        begin, end = match.span("value")
        if begin < end and not text.startswith(REDACTED, begin) and (
                name is None or _secret_strength(text[match.start(name):match.end(name)]) > 0):
            spans.append((begin, end))
    return _splice(text, spans, known)


# A bare value that refers to the secret instead of holding it: code (``lexer.next()``, ``os.environ["X"]``,
# ``self.password``, ``api_key=api_key,``), templates (``${DB_PASSWORD}``, ``$TOKEN``, ``{{ .Values.password }}``),
# a version pin (``detect-secrets==1.5.0``). A call that wraps a literal (``SecretStr("...")``) is a value.
_CALL_ARGS = r"""(?:\((?:[^()\n]|\([^()\n]{0,256}\)){0,256}\)|\[[^\[\]\n]{0,256}\])"""
_END_OF_EXPRESSION = r"""(?=[ \t]*(?:[,;)}\]\n#]|\Z|(?:if|else|and|or|for)\b))"""
_REFERENCE = re.compile(
    rf"""(?:(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*{_CALL_ARGS}?|(?P<callee>[A-Za-z_]\w*){_CALL_ARGS}"""
    rf"""|\$\{{?[A-Za-z_]\w*\}}?|\{{\{{[^{{}}\n]{{0,256}}\}}\}}|%\([\w.]{{1,64}}\)s|v?\d+(?:\.\d+)+[\w.+-]*){_END_OF_EXPRESSION}"""
    r"""|[A-Za-z_]\w*(?=[ \t]*[,)])""")  # a name passed on in an argument list
_WRAPPERS = frozenset({"SecretStr", "SecretBytes", "Secret", "str", "bytes", "b64decode", "bytes.fromhex"})
# A type annotation (``token: CancellationToken | None = None``, ``password: str = "x"``): a builtin type, or a
# type with ``|`` or ``[...]``; what is assigned after it is the value.
_TYPE = r"""[A-Za-z_][\w.]*(?:\[[^\[\]\n]{0,128}\])?"""
_ANNOTATION = re.compile(rf"""(?:(?:str|int|float|bool|bytes|Any|SecretStr|SecretBytes)|{_TYPE}(?:[ \t]*\|[ \t]*{_TYPE})+"""
                         r"""|[A-Za-z_][\w.]*\[[^\[\]\n]{0,128}\])[ \t]*(?=[=,)\n#]|$)""")
_NOT_A_VALUE = frozenset({"null", "none", "nil", "true", "false", "undefined", "[]", "{}", "()", "''", '""', "...",
                          "\u2026"})


def _assigned_value(text: str, start: int, in_query: bool, colon: bool) -> tuple[int, int, bool] | None:
    """The span of the value assigned at `start` and whether it is a literal (a quoted or delimited value,
    masked wherever else it appears too), or None where there is nothing to mask."""
    if in_query:  # a URL query or a connection string: to the separator
        found = _VALUE_IN_QUERY.match(text, start)
        return (*found.span(), True) if found is not None else None
    if colon and (annotation := _ANNOTATION.match(text, start)) is not None:
        after = re.compile(r"=[ \t]*").match(text, annotation.end())
        return _assigned_value(text, after.end(), False, False) if after is not None else None
    reference = _REFERENCE.match(text, start)
    if reference is not None:
        return (start, reference.end(), False) if reference.group("callee") in _WRAPPERS else None
    if text[start:start + 1] in ("(", "[", "{"):  # auth=("admin", "pw"), credentials: {user: x, pass: y}
        line_end = text.find("\n", start)
        stop = _balanced_end(text, start, min(start + 4096, len(text) if line_end < 0 else line_end))
        return (start, stop, False) if stop is not None and text[start:stop] not in _NOT_A_VALUE else None
    found = _VALUE.match(text, start)
    if found is None:
        return None
    group = next(g for g in ("esc", "quoted", "rest") if found.group(g) is not None)
    value = found.group(group)
    bare = value.strip().rstrip(",;)").lower()
    if value.startswith(REDACTED) or bare in _NOT_A_VALUE or group == "rest" and len(bare) < 3:
        return None
    return (*found.span(group), group != "rest")


def _mask_assignments(text: str, known: set[str]) -> str:
    """Every value assigned to a secret-named key: ``password: two words``, ``"token": "X"``, ``a_key='X'``,
    ``\\"secret\\": \\"X\\"``, ``?access_token=X&``, ``;AccountKey=X;``, ``auth=("u", "pw")``."""
    spans: list[tuple[int, int]] = []
    pos = 0
    folded = _folded(text)
    hints, where = (_CASED[_KEY_HINT], folded) if folded is not None else (_KEY_HINT, text)
    while (hint := hints.search(where, pos)) is not None:
        end = _KEY_CHARS.match(text, hint.end())
        key_end = end.end() if end is not None else hint.end()
        pos = key_end
        head = _KEY_CHARS.match(text[max(0, hint.start() - _KEY_MAX):hint.start()][::-1])
        key_start = hint.start() - (head.end() if head is not None else 0)
        if key_end - hint.end() > _KEY_MAX:
            continue
        op = _ASSIGN_OP.match(text, key_end)
        if op is None:
            continue
        key = text[key_start:key_end].strip(".-")
        strength = _secret_strength(key)
        quoted_key = key_start > 0 and text[key_start - 1] in "\"'"
        # a weak word (``pass``, ``auth``) alone is prose ("first pass = ...") unless it is quoted or glued to
        # its value (``auth=("u", "pw")``, ``pass=X``)
        glued = op.group(0) in ("=", ":")
        if not strength or strength == 1 and len(_WORD.findall(key)) < 2 and not quoted_key and not glued:
            continue
        in_query = key_start > 0 and text[key_start - 1] in "?&;" and "=" in op.group(0)
        if quoted_key and text[key_start - 1] not in op.group(0) and text.startswith(text[key_start - 1], op.end()):
            continue  # ``"DB_PASSWORD="``: the quote after the sign closes the text the key is in
        value = _assigned_value(text, op.end(), in_query, op.group(0).strip(" \t\"'\\") == ":")
        if value is not None:
            begin, stop, literal = value
            spans.append((begin, stop))
            if literal:
                _remember(text[begin:stop], known)
            pos = stop
    return _splice(text, spans)


def _mask_private_keys(text: str) -> str:
    """Every private-key block, from its BEGIN line to its END line or, when the END is cut off, to the end."""
    if "PRIVATE" in text or "PuTTY" in text:
        out: list[str] = []
        pos = 0
        while (found := _PRIVATE_KEY_BEGIN.search(text, pos)) is not None:
            end = _PRIVATE_KEY_END.search(text, found.end())
            stop = end.end() if end is not None else len(text)
            out.append(text[pos:found.start()] + REDACTED)
            pos = stop
        text = "".join(out) + text[pos:]
    if "LS0tLS1CRUdJTi" in text:
        text = _B64_PRIVATE_KEY.sub(REDACTED, text)
    return text


def _folded(text: str) -> str | None:
    """`text` lowered, where lowering keeps every character's position (it does but for a few letters)."""
    low = text.lower()
    return low if len(low) == len(text) else None


def _text_rules(text: str, known: set[str]) -> str:
    """Our key-name, flag, header, URL and command rules on one text (each skipped when its hint is absent)."""
    text = _mask_assignments(text, known)
    folded = _folded(text)
    if "-" in text:
        text = _sub_value(_FLAG, text, known, folded, "flag")
    if "</" in text:
        text = _sub_value(_XML_ELEMENT, text, known, name="tag")
    if "=" in text:
        text = _sub_value(_XML_PAIR, text, known, _folded(text), "name")
    if "://" in text:
        text = _sub_value(_URL_CREDENTIALS, text, known)
    if "-" in text:
        if "my" in text or "maria" in text:
            text = _sub_value(_MYSQL_P, text, known)
        if "login" in text or "sshpass" in text or "redis-cli" in text:
            text = _sub_value(_SHORT_PASSWORD, text, known)
        if "-u" in text:
            text = _sub_value(_CURL_USER, text, known)
    if "machine" in text:  # a .netrc
        text = _sub_value(_NETRC_PASSWORD, text, known)
    folded = _folded(text)
    if folded is None or "bearer" in folded or "basic" in folded or "digest" in folded:
        text = _sub_value(_AUTH_SCHEME, text, known, folded)
    return text


def _changed_leaves(old: Any, new: Any, out: list[tuple[Any, Any]]) -> None:
    """The (old, new) pairs of leaves that redaction replaced, walking both structures together."""
    if new is old:
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping) and list(old.keys()) == list(new.keys()):
        for key, value in old.items():
            _changed_leaves(value, new[key], out)
    elif isinstance(old, list | tuple) and isinstance(new, list | tuple) and len(old) == len(new):
        for item, masked in zip(old, new, strict=True):
            _changed_leaves(item, masked, out)
    else:
        out.append((old, new))


class _Notation:
    """How a structure is written in a text: its leaves (each way they may be written), and the whole."""

    def __init__(self, leaf: Callable[[Any], Iterable[str]], read: Callable[[str], Any],
                 write: Callable[[Any, bool], str]) -> None:
        self.leaf = leaf
        self.read = read
        self.write = write


def _json_leaf(value: Any) -> set[str]:
    return {json.dumps(value), json.dumps(value, ensure_ascii=False)}


def _json_write(value: Any, multiline: bool) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2 if multiline else None, default=str)


def _shell_escape(text: str) -> str:
    return re.sub(r'(["\\$`])', r"\\\1", text)


def _shell_unescape(text: str) -> str:
    return re.sub(r'\\(["\\$`])', r"\1", text)


def _python_read(text: str) -> Any:
    import ast

    return ast.literal_eval(text)


_JSON = _Notation(_json_leaf, _DECODER.decode, _json_write)
_SHELL_JSON = _Notation(lambda v: {_shell_escape(w) for w in _json_leaf(v)},
                        lambda t: _DECODER.decode(_shell_unescape(t)), lambda v, m: _shell_escape(_json_write(v, m)))
_PYTHON = _Notation(lambda v: {repr(v)}, _python_read, lambda v, m: repr(v))


def _rewrite(segment: str, value: Any, depth: int, budget: _Budget, notation: _Notation) -> str:
    """`segment` (`value` written in `notation`) with its secrets masked.

    The masked leaves are written back in place, so the agent's layout stays; where that does not
    reproduce the masked structure exactly (a secret also used as a key, odd escapes), the masked
    structure is written out anew.
    """
    # the segment's characters were paid for by the string holding it: its walk scans them again, unmetered
    masked = _walk(value, depth + 1, _Budget(math.inf, budget.max_depth, budget.known))
    if masked is value:
        return segment
    pairs: list[tuple[Any, Any]] = []
    _changed_leaves(value, masked, pairs)
    rewritten = segment
    for old, new in pairs:
        replacement = min(notation.leaf(new), key=len)
        for written in notation.leaf(old):
            rewritten = rewritten.replace(written, replacement)
    try:
        if notation.read(rewritten) == masked:
            return rewritten
    except Exception:  # noqa: BLE001 - whatever the reader raises, the structure is written anew
        pass
    return notation.write(masked, "\n" in segment)


_PY_TOKEN = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|[\[\](){}]""")


def _balanced_end(text: str, start: int, stop: int | None = None) -> int | None:
    """Where the bracket opened at `start` closes (quotes respected) before `stop`, or None."""
    depth = 0
    for token in _PY_TOKEN.finditer(text, start, len(text) if stop is None else stop):
        mark = token.group()
        if mark in "[({":
            depth += 1
        elif mark in "])}":
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def _mask_json_inside(text: str, depth: int, budget: _Budget) -> tuple[str, list[tuple[int, int]]]:
    """`text` with every structure written in it masked by structure: JSON (bare, or in a double-quoted
    shell word) and Python literals (a ``str()`` of a dict or list); and the spans of the bare ones in
    the result, which the caller need not scan again."""
    if depth + 1 >= budget.max_depth or not ("{" in text or "[" in text or "(" in text):
        return text, []
    if '\\"' in text:
        text = _mask_shell_quoted_json(text, depth, budget)
    out: list[str] = []
    done: list[tuple[int, int]] = []
    length = 0
    last = pos = tries = 0
    work = _JSON_WORK * len(text)  # parse attempts that fail still read: together at most this much
    while tries < _JSON_TRIES and work > 0:
        start_match = _STRUCTURE_START.search(text, pos)
        if start_match is None:
            break
        tries += 1
        start = start_match.start()
        notation = _JSON
        try:
            if start_match.group("python"):
                raise ValueError("not JSON")
            value, end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            if not start_match.group("python"):  # JSON that does not parse (cut short, or not JSON at all)
                work -= len(text) - start
                pos = start + 1
                continue
            notation = _PYTHON
            closed = _balanced_end(text, start)
            end = closed if closed is not None else len(text)
            try:
                value = _python_read(text[start:end]) if closed is not None else None
            except Exception:  # noqa: BLE001 - ast raises SyntaxError, ValueError, MemoryError, RecursionError
                value = None
            if not isinstance(value, dict | list | tuple):
                work -= len(text) - start
                pos = start + 1
                continue
        work -= end - start
        masked = _rewrite(text[start:end], value, depth, budget, notation)
        out.append(text[last:start])
        length += start - last
        done.append((length, length + len(masked)))
        out.append(masked)
        length += len(masked)
        last = pos = end
    out.append(text[last:])
    return "".join(out), done


def _mask_shell_quoted_json(text: str, depth: int, budget: _Budget) -> str:
    """JSON inside a double-quoted shell word: ``curl -d "{\\"password\\": \\"X\\"}"``."""
    def mask(match: re.Match[str]) -> str:
        body = match.group("body")
        try:
            value = _SHELL_JSON.read(body)
        except (ValueError, RecursionError):
            return match.group(0)
        return '"' + _rewrite(body, value, depth, budget, _SHELL_JSON) + '"'
    return _SHELL_DQ_JSON.sub(mask, text, count=_JSON_TRIES)


def _scan_head(text: str, limit: float) -> tuple[str, int]:
    """The head of `text` that fits `limit`, ending at a separator so no secret is cut in half, and how much
    was left out."""
    if len(text) <= limit:
        return text, 0
    head = text[:max(0, int(limit))]
    cut = max(head.rfind(c) for c in " \n\t,;")
    head = head[:cut] if cut > 0 else ""
    return head, len(text) - len(head)


def _redact_string(text: str, depth: int, budget: _Budget, quoted: bool) -> str:
    """One string (a text, or a value inside a structure when `quoted`) with its secrets masked."""
    head, left_out = _scan_head(text, budget.chars)
    budget.chars -= len(head)
    out = _mask_private_keys(head)
    out, structured = _mask_json_inside(out, depth, budget)
    # detect-secrets reads what the JSON walk has not already read value by value
    outside = out if not structured else "\n".join(
        out[a:b] for a, b in zip([0] + [end for _, end in structured], [s for s, _ in structured] + [len(out)],
                                 strict=True))
    out = _text_rules(out, budget.known)
    out = _mask_found(out, _found_values(outside, quoted))
    out = _TOKEN_SHAPES.sub(REDACTED, out)
    out = _mask_known_in(out, budget.known)
    if left_out:
        out += f"...[{left_out} chars cut]"
    return text if out == text else out


_MIXED = re.compile(r"[0-9]|[^\w\s]|[a-z].*[A-Z]|[A-Z].*[a-z]")


def _remember(secret: Any, known: set[str]) -> str:
    """The marker for `secret`, which is masked wherever else it appears in this call too when it cannot be
    an ordinary word or number (long enough, letters mixed with digits, symbols or both cases)."""
    if isinstance(secret, str) and len(secret) >= _KNOWN_MIN and any(c.isalpha() for c in secret) \
            and _MIXED.search(secret) is not None:
        known.add(secret)
    return REDACTED


def _mask_known_in(text: str, known: set[str]) -> str:
    for secret in sorted((k for k in known if k in text), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _mask_known(value: Any, known: set[str], depth: int = 0) -> Any:
    """`value` (already walked) with the secrets found later in the walk masked where they appeared earlier."""
    if isinstance(value, str):
        masked = _mask_known_in(value, known)
        return value if masked == value else masked
    if depth > MAX_DEPTH * 2:
        return value
    if isinstance(value, dict):
        out = {key: _mask_known(item, known, depth + 1) for key, item in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list | tuple):
        items = [_mask_known(item, known, depth + 1) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _walk(value: Any, depth: int, budget: _Budget) -> Any:
    """`value` with its secrets masked; the very object when nothing in it changed."""
    if isinstance(value, str):
        return _redact_string(value, depth, budget, quoted=True)
    if value is None or isinstance(value, bool | int | float):
        budget.chars -= 4
        return value
    if depth >= budget.max_depth:
        return REDACTED
    try:
        if isinstance(value, Mapping):
            return _walk_mapping(value, depth, budget)
        if isinstance(value, list | tuple):
            return _walk_sequence(value, depth, budget)
        text = repr(bytes(value)) if isinstance(value, bytes | bytearray) else str(value)
        masked = _redact_string(text, depth, budget, quoted=False)
        return value if masked is text else masked  # an object with nothing to mask stays as it is
    except Exception:  # a container or object that cannot be read whole is masked whole
        return REDACTED


_NAME_FIELDS = ("name", "Name", "key", "Key", "header", "Header")
_VALUE_FIELDS = frozenset({"value", "Value"})


def _walk_mapping(value: Mapping[Any, Any], depth: int, budget: _Budget) -> Any:
    named_secret = any(_names_secret(value[f]) for f in _NAME_FIELDS if f in value)
    out: dict[Any, Any] = {}
    changed = False
    for index, (key, item) in enumerate(value.items()):
        if budget.chars <= 0:
            out["..."] = f"[{len(value) - index} entries cut]"
            changed = True
            break
        budget.chars -= 4
        strength = _secret_strength(key) if isinstance(key, str) else 0
        if strength and _maskable(item, strength) or named_secret and key in _VALUE_FIELDS and _maskable(item, 2):
            masked = _remember(item, budget.known)
        else:
            masked = _walk(item, depth + 1, budget)
        new_key = key
        if isinstance(key, str):
            if len(key) >= 16:
                new_key = _redact_string(key, depth, budget, quoted=True)
        elif not (key is None or isinstance(key, bool | int | float)):
            new_key = _redact_string(str(key), depth, budget, quoted=False)
        if new_key is not key and new_key in out:
            new_key = f"{new_key}#{index}"
        out[new_key] = masked
        changed = changed or masked is not item or new_key is not key
    return out if changed else value


def _walk_sequence(value: list[Any] | tuple[Any, ...], depth: int, budget: _Budget) -> Any:
    out: list[Any] = []
    changed = False
    mask_next = False
    # a (name, value) pair: ["X-Vault-Token", "..."] (not a list of two field names)
    pair = (len(value) == 2 and _names_secret(value[0]) and isinstance(value[1], str)
            and not _names_secret(value[1]))
    for index, item in enumerate(value):
        if budget.chars <= 0:
            out.append(f"[{len(value) - index} items cut]")
            changed = True
            break
        if (mask_next or pair and index == 1) and _maskable(item, 1):
            masked = _remember(item, budget.known)
        else:
            masked = _walk(item, depth + 1, budget)
        mask_next = False
        if isinstance(item, str) and item.startswith("-") and (flag := _FLAG_WORD.fullmatch(item)) is not None:
            mask_next = is_secret_key(flag.group("flag"))  # argv: ["--password", "X"]
        out.append(masked)
        changed = changed or masked is not item
    if not changed:
        return value
    return tuple(out) if isinstance(value, tuple) else out


# ------------------------------------------------------------------ public
def redact_value(value: Any, *, max_chars: int = MAX_SCAN_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """`value` (any JSON-able value) with the same structure and every secret replaced by ``[REDACTED]``.

    Strings past `max_chars` characters of scanned content in all are cut with a ``...[N chars cut]``
    note (containers past it end with an ``[N items cut]`` item), nesting past `max_depth` is masked
    whole, and nothing raises: a part that cannot be read is masked whole. What holds no secret comes back
    as the very same object; mappings that do come back as dicts, lists as lists, tuples as tuples, any
    other object as its redacted ``str()``.
    """
    try:
        budget = _Budget(max_chars, max_depth)
        if isinstance(value, str):  # a text, as `redact_text` reads it; strings inside a structure are values
            return _redact_string(value, 0, budget, quoted=False)
        masked = _walk(value, 0, budget)
        return _mask_known(masked, budget.known) if budget.known else masked
    except Exception:  # RecursionError, MemoryError on hostile input: nothing is better than a leak
        return REDACTED


def redact_text(text: str, *, max_chars: int = MAX_SCAN_CHARS) -> str:
    """`text` with every secret masked (JSON inside it walked as by `redact_value`); past `max_chars`, cut."""
    try:
        return _redact_string(text, 0, _Budget(max_chars, MAX_DEPTH), quoted=False)
    except Exception:
        return REDACTED
