"""Secrets never reach spans: no content at all without capture_content, redacted content with it (issues 15, 25)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail import Action, Finding, Guard, Layer, Result
from guardrail.core import spans as tm
from tests.fuzzing import FUZZ, FUZZ_EXAMPLES
from tests.hostile.memlimit import address_space_limit
from tests.hostile.spans import leaked, ordinary_results, secret_cases, secret_padded

CASES = secret_cases()
ORDINARY = ordinary_results()


class Echo(Layer):
    """A layer whose findings quote what the agent sent, as gate hints and verifier messages do."""

    name = "echo"

    def before_action(self, ctx, action):
        return [Finding(layer=self.name, check="echo", message=f"saw {action.describe()} {action.args}")]

    def after_result(self, ctx, action, result):
        return [Finding(layer=self.name, check="echo", message=f"tool said {result.output}", blocking=True)]


class Quoting(Layer):
    """A layer that fails with the content in its exception message."""

    name = "quoting"

    def before_action(self, ctx, action):
        raise ValueError(f"cannot parse {action.args} {action.command}")


def _everything_on(spans) -> str:
    """Every name, attribute, status and event attribute of every finished span, as one text."""
    parts = []
    for span in spans.get_finished_spans():
        parts.append(span.name)
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        parts.append(str(span.status.description))
        for event in span.events:
            parts.append(json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


def _attribute_values(spans) -> str:
    """The captured argument and result attributes as they are (not JSON-escaped again), one per line."""
    return "\n".join(str(value) for span in spans.get_finished_spans() for key, value in span.attributes.items()
                     if key in (tm.GEN_AI_TOOL_CALL_ARGUMENTS, tm.GEN_AI_TOOL_CALL_RESULT))


def _drive(guard: Guard, payload) -> None:
    ctx = guard.start_episode()
    action = Action.tool_call("run", payload) if isinstance(payload, dict) else Action.shell(payload)
    ctx.before_action(action)
    ctx.after_result(action, Result(output=payload if isinstance(payload, str) else json.dumps(payload)))


def test_the_suite_plants_forty_distinct_secrets_where_a_span_would_show_them():
    assert len(CASES) >= 40
    assert len({c.secret for c in CASES}) == len(CASES) and len({c.name for c in CASES}) == len(CASES)
    for case in CASES:  # each secret sits well inside the 2,048-character cap: only redaction can hide it
        text = case.payload if isinstance(case.payload, str) else json.dumps(case.payload)
        assert 0 <= text.find(case.secret[:12]) < 1500, case.name


@pytest.mark.parametrize("case", CASES[:18], ids=[c.name for c in CASES[:18]])
def test_without_capture_no_argument_or_result_text_reaches_any_span(spans, case):
    _drive(Guard([Echo(), Quoting()]), case.payload)
    seen = _everything_on(spans)
    assert leaked(case.secret, seen) is None
    assert "saw " not in seen and "tool said" not in seen and "cannot parse" not in seen
    findings = [json.loads(s.attributes[tm.GUARDRAIL_FINDINGS]) for s in spans.get_finished_spans()
                if tm.GUARDRAIL_FINDINGS in s.attributes]
    assert findings and all("message" not in f for batch in findings for f in batch)
    assert {f["check"] for batch in findings for f in batch} == {"echo", "internal_error"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_with_capture_no_planted_secret_survives_on_any_span(spans, case):
    _drive(Guard([Echo(), Quoting()], capture_content=True), case.payload)
    seen = _everything_on(spans)
    assert leaked(case.secret, seen) is None, leaked(case.secret, seen)
    assert "[REDACTED]" in seen
    assert "saw " in seen and "tool said" in seen  # capture on: messages are there, redacted


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_redaction_finds_the_secret_inside_ordinary_output(case):
    text = secret_padded(case, 1500)
    out = tm.redact(text, cap=4000)
    assert leaked(case.secret, out) is None
    assert "12 tests passed" in out  # the ordinary text around it stays readable


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_redact_value_keeps_the_structure_and_masks_the_secret(case):
    out = tm.redact_value(case.payload)
    assert type(out) is type(case.payload)
    if isinstance(case.payload, dict):
        assert out.keys() == case.payload.keys()
    assert leaked(case.secret, json.dumps(out)) is None and leaked(case.secret, str(out)) is None


@pytest.mark.parametrize("case", ORDINARY, ids=[c.name for c in ORDINARY])
def test_ordinary_tool_output_keeps_its_content(spans, case):
    assert tm.redact_value(case.payload) == case.payload
    _drive(Guard([Echo()], capture_content=True), case.payload)
    seen = _attribute_values(spans)
    assert "[REDACTED]" not in seen
    for phrase in case.keep:
        assert phrase in seen, phrase


def test_redaction_leaves_ordinary_text_alone():
    text = "cat src/app.py | grep -n token_count && mkdir -p build && ssh -p 22 host 'ls /tmp'"
    assert tm.redact(text) == text
    args = {"path": "src/utils/password_reset.py", "line": 12, "query": "author: alice"}
    assert json.loads(tm.redact(args)) == args


def test_a_json_text_keeps_its_layout_where_nothing_is_masked_and_stays_json_where_something_is():
    text = json.dumps({"user": "ops", "password": "Zq8rT2mLx9", "nested": {"n": 1}}, indent=2)
    out = tm.redact_text(text)
    assert json.loads(out) == {"user": "ops", "password": "[REDACTED]", "nested": {"n": 1}}
    assert out == text.replace("Zq8rT2mLx9", "[REDACTED]")  # the agent's own indentation kept


def test_a_secret_key_masks_the_value_in_every_container_shape():
    out = tm.redact_value({"creds": {"user": "svc", "pw": "x"}, "tokens": 12, "token_count": 9, "auth_method": "oauth",
                           "password": 123456, "empty_password": "", "api_key_path": "/run/key"})
    assert out == {"creds": "[REDACTED]", "tokens": 12, "token_count": 9, "auth_method": "oauth",
                   "password": "[REDACTED]", "empty_password": "", "api_key_path": "/run/key"}
    assert tm.redact_value(("--token", "abc123secret", "next")) == ("--token", "[REDACTED]", "next")
    assert tm.is_secret_key("X-Amz-Security-Token") and tm.is_secret_key("PGPASSWORD")
    assert not tm.is_secret_key("max_tokens") and not tm.is_secret_key("primary_key")


def test_a_cut_at_the_cap_never_leaves_half_a_secret():
    key = "sk-proj-" + "Q7w" * 20
    out = tm.redact("x" * 2030 + " " + key, cap=2048)
    assert "Q7wQ7w" not in out


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")

    __repr__ = __str__


class _Exploding(dict):
    def items(self):
        raise RuntimeError("mapping broke")


def test_redaction_never_raises_and_masks_what_it_cannot_read():
    assert tm.redact_value(_Unprintable()) == tm.REDACTED
    assert tm.redact_value({"a": [1, _Unprintable()]}) == {"a": [1, tm.REDACTED]}
    assert tm.redact_value(_Exploding(a=1)) == tm.REDACTED
    assert isinstance(tm.redact(_Exploding(a=1)), str)
    cyclic: list = [1]
    cyclic.append(cyclic)
    assert tm.redact_value(cyclic)[0] == 1  # walked to the depth bound, then masked
    assert tm.redact_value({1: "a", None: "b", 2.5: float("nan")}) == {1: "a", None: "b", 2.5: pytest.approx(
        float("nan"), nan_ok=True)}
    assert tm.redact_value(b"password=hunter2x") == "b'password=[REDACTED]"


def test_structure_past_the_depth_bound_is_masked_whole():
    deep: object = {"password": "Zq8rT2mLx9"}
    for _ in range(200):
        deep = {"next": deep}
    out = json.dumps(tm.redact_value(deep))
    assert "Zq8rT2mLx9" not in out and tm.REDACTED in out
    as_text = json.dumps({"password": "Zq8rT2mLx9"})
    for _ in range(12):  # JSON inside a JSON string, twelve times over (each level doubles the escapes)
        as_text = json.dumps({"inner": as_text})
    assert "Zq8rT2mLx9" not in tm.redact_text(as_text) and "Zq8rT2mLx9" in as_text


def test_a_huge_value_is_scanned_up_to_the_budget_and_cut_after_it():
    secret = "Zq8rT2mLx9Qw"
    huge = {"log": "line ok\n" * 500_000 + f"password={secret}\n", "items": list(range(300_000))}
    with address_space_limit(512 * 1024 * 1024):
        out = tm.redact_value(huge, max_chars=100_000)
    assert secret not in json.dumps(out)
    assert out["log"].endswith("chars cut]") and len(out["log"]) < 100_100
    assert len(out["items"]) < 300_000 and str(out["items"][-1]).endswith("items cut]")


@pytest.mark.fuzz
@FUZZ
@given(st.data())
def test_a_secret_under_a_secret_named_key_never_survives(data):
    secret = "s3cr3t" + data.draw(st.text(alphabet="abcdefghjkmnpqrstuvwxyz0123456789", min_size=6, max_size=30))
    key = data.draw(st.sampled_from(["password", "db_password", "passphrase", "credentials", "private_key",
                                     "api_key", "client_secret", "auth_token", "AWS_SECRET_ACCESS_KEY",
                                     "refresh_token", "accessToken", "X-Api-Key", "clientSecret", "SharedAccessKey"]))
    nest = data.draw(st.integers(min_value=0, max_value=4))
    value: object = {key: secret}
    for level in range(nest):
        value = {f"level{level}": value, "other": [1, "two"]} if level % 2 else [value, "x"]
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):  # JSON inside JSON strings
        value = {"payload": json.dumps(value)}
    written = data.draw(st.sampled_from(["value", "json", "python", "curl_single", "curl_double"]))
    as_json = json.dumps(value)
    payload = {"value": value, "json": as_json, "python": f"result: {value!r}",
               "curl_single": f"curl -d '{as_json}' https://x", "curl_double":
               'curl -d "' + as_json.replace("\\", "\\\\").replace('"', '\\"') + '" https://x'}[written]
    out = tm.redact(payload, cap=100_000)
    assert secret not in out and secret not in json.dumps(tm.redact_value(payload))


@pytest.mark.fuzz
def test_redaction_is_bounded_on_pathological_text():
    """Inputs built to make the secret patterns or the JSON search backtrack: redaction stays linear in the
    (capped) text and within a memory cap."""
    import time

    size = 20_000 if FUZZ_EXAMPLES <= 200 else 200_000
    hostile = ["password:" * (size // 9), "://a:" * (size // 5), "eyJ" + "a" * size, "-p" * size,
               "'" + "A" * size, "Authorization: " + "Bearer " * (size // 7), "a=\"" * (size // 3),
               "[" * size, "{" * size, '{"a":' * (size // 5), '[{"a": "' * (size // 8), "password" * (size // 8),
               '"' + '\\"' * size, "<password>" * (size // 10), 'key="password" value="' * (size // 22),
               json.dumps("x" * size), "postgres://u:" + "@" * size]
    for text in hostile:
        started = time.process_time()
        with address_space_limit(256 * 1024 * 1024):
            out = tm.redact(text)
            value = tm.redact_value({"text": text, "as_list": [text]})
        assert len(out) <= tm.DEFAULT_CONTENT_CAP + 40
        assert isinstance(value, dict)
        # a generous bound on CPU time: a backtracking blow-up takes minutes, not seconds
        assert time.process_time() - started < 5.0, text[:20]
