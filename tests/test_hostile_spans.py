"""Secrets never reach spans: no content at all without capture_content, redacted content with it (issue 15, item 4)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail import Action, Finding, Guard, Layer, Result
from guardrail.core import spans as tm
from tests.fuzzing import FUZZ, FUZZ_EXAMPLES
from tests.hostile.memlimit import address_space_limit
from tests.hostile.spans import secret_cases, secret_padded

CASES = secret_cases()


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
    """Every attribute and event attribute of every finished span, as one text."""
    parts = []
    for span in spans.get_finished_spans():
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        parts.append(str(span.status.description))
        for event in span.events:
            parts.append(json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


def _drive(guard: Guard, payload) -> None:
    ctx = guard.start_episode()
    action = Action.tool_call("run", payload) if isinstance(payload, dict) else Action.shell(payload)
    ctx.before_action(action)
    ctx.after_result(action, Result(output=payload if isinstance(payload, str) else json.dumps(payload)))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_without_capture_no_argument_or_result_text_reaches_any_span(spans, case):
    _drive(Guard([Echo(), Quoting()]), case.payload)
    seen = _everything_on(spans)
    assert case.secret not in seen
    assert "saw " not in seen and "tool said" not in seen and "cannot parse" not in seen
    findings = [json.loads(s.attributes[tm.GUARDRAIL_FINDINGS]) for s in spans.get_finished_spans()
                if tm.GUARDRAIL_FINDINGS in s.attributes]
    assert findings and all("message" not in f for batch in findings for f in batch)
    assert {f["check"] for batch in findings for f in batch} == {"echo", "internal_error"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_with_capture_every_listed_secret_is_redacted(spans, case):
    _drive(Guard([Echo(), Quoting()], capture_content=True), case.payload)
    seen = _everything_on(spans)
    assert case.secret not in seen
    assert "[REDACTED]" in seen
    assert "saw " in seen and "tool said" in seen  # capture on: messages are there, redacted


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_redaction_finds_the_secret_inside_ordinary_output(case):
    text = secret_padded(case, 1500)
    out = tm.redact(text, cap=4000)
    assert case.secret not in out
    assert "12 tests passed" in out  # the ordinary text around it stays readable


def test_redaction_leaves_ordinary_text_alone():
    text = "cat src/app.py | grep -n token_count && mkdir -p build && ssh -p 22 host 'ls /tmp'"
    assert tm.redact(text) == text
    args = {"path": "src/utils/password_reset.py", "line": 12, "query": "author: alice"}
    assert json.loads(tm.redact(args)) == args


def test_a_cut_at_the_cap_never_leaves_half_a_secret():
    key = "sk-proj-" + "Q7w" * 20
    out = tm.redact("x" * 2030 + " " + key, cap=2048)
    assert "Q7wQ7w" not in out


@pytest.mark.fuzz
@FUZZ
@given(st.data())
def test_a_secret_under_a_secret_named_key_never_survives(data):
    secret = "s3cr3t" + data.draw(st.text(alphabet="abcdefghjkmnpqrstuvwxyz0123456789", min_size=6, max_size=30))
    key = data.draw(st.sampled_from(["password", "db_password", "passphrase", "credentials", "private_key",
                                     "api_key", "client_secret", "auth_token", "AWS_SECRET_ACCESS_KEY"]))
    nest = data.draw(st.integers(min_value=0, max_value=4))
    value: object = {key: secret}
    for level in range(nest):
        value = {f"level{level}": value, "other": [1, "two"]} if level % 2 else [value, "x"]
    as_text = data.draw(st.booleans())
    out = tm.redact(json.dumps(value) if as_text else value, cap=100_000)
    assert secret not in out


@pytest.mark.fuzz
def test_redaction_is_bounded_on_pathological_text():
    """Inputs built to make the secret patterns backtrack: redaction stays linear in the (capped) text."""
    import time

    size = 20_000 if FUZZ_EXAMPLES <= 200 else 200_000
    hostile = ["password:" * (size // 9), "://a:" * (size // 5), "eyJ" + "a" * size, "-p" * size,
               "'" + "A" * size, "Authorization: " + "Bearer " * (size // 7), "a=\"" * (size // 3)]
    for text in hostile:
        started = time.process_time()
        with address_space_limit(256 * 1024 * 1024):
            out = tm.redact(text)
        assert len(out) <= tm.DEFAULT_CONTENT_CAP + 40
        # a generous bound on CPU time: a backtracking blow-up takes minutes, not seconds
        assert time.process_time() - started < 5.0, text[:20]
