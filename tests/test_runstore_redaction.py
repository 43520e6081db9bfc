"""The run store's redaction: its fast path leaves alone only what the full rules would leave alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from guardrail.core import spans
from guardrail.core.corpus import iter_corpus
from guardrail.core.events import Step, StepKind, ToolEvent
from guardrail.core.redaction import is_secret_key
from guardrail.core.runstore.recorder import may_hold_secret, redact_content, step_record
from tests.fuzzing import FUZZ
from tests.hostile.spans import secret_cases

REPO = Path(__file__).resolve().parents[1]


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _corpus_strings(limit_per_corpus: int = 400) -> Iterator[str]:
    roots = sorted((REPO / "traces" / "corpora").iterdir())
    shared = REPO.parent / "shared" / "corpora" / "sentinel"
    if shared.is_dir():
        roots += sorted(p for p in shared.iterdir() if (p / "manifest.json").is_file())
    for root in roots:
        if not (root / "manifest.json").is_file():
            continue
        for count, episode in enumerate(iter_corpus(root)):
            if count >= limit_per_corpus:
                break
            if episode.task:
                yield episode.task
            for step in episode.steps:
                yield step.text
                for event in step.tool_events:
                    yield from _strings(event.args)
                    if event.result:
                        yield event.result


def test_every_planted_secret_takes_the_full_rules():
    for case in secret_cases(0) + secret_cases(1):
        texts = list(_strings(case.payload))
        assert any(may_hold_secret(text) for text in texts) or any(
            is_secret_key(key) for key in _strings(case.payload)), case.name


def test_what_the_fast_path_keeps_the_full_rules_would_keep():
    kept = 0
    for text in _corpus_strings():
        if not may_hold_secret(text):
            kept += 1
            assert spans.redact_text(text) == text, text[:300]
    assert kept > 1000  # the fast path is taken for most real content, or it saves nothing


@pytest.mark.parametrize("case", secret_cases(2), ids=lambda c: c.name)
def test_a_secret_in_a_step_never_reaches_the_store(case):
    payload = case.payload if isinstance(case.payload, dict) else {"text": case.payload}
    text = case.payload if isinstance(case.payload, str) else json.dumps(case.payload)
    step = Step(index=0, kind=StepKind.TOOL_CALL, text=f"calling: {text}", task=text,
                tool_events=[ToolEvent(name="call", args=payload, result=text)])
    assert case.secret not in step_record(step)
    assert case.secret not in json.dumps(redact_content({"task": text, "nested": [{"note": text}]}))


# Pieces of what the rules look for (secret words, assignments, flags, URL credentials, token and hex runs, letters
# whose lowering moves offsets) and of what they do not, shuffled together.
_FRAGMENTS = ["pass", "password", "key", "api_key", "token", "session", "sig", "contrase", "private", "Bearer ",
              "sk-", "ghp_", "eyJ", "AKIA", "=", ":=", "=>", ": ", "\\\"", "--", "-", "-u ", "--user", "://", "@", " ",
              "\t", "\n", "_", ".", "a1b2c3d4e5", "deadbeef9", "0123456789abcdef0123", "Tallinn", "$56/night", "İ", "ſ",
              "K", "é", "中", "x" * 17, "9" * 12, "\"", "'", "`", "{", "}", "!=", "==", "[]", "<", ">", "</", "creds",
              "jwt", "contrasena", " value=", "name=", "sshpass", "redis-cli", "docker login", "az login", " -p ", " -a ",
              "glpat-", "npm_", "ya29.", "GOCSPX-", "QWxhZGRpbjpvcGVuIHNlc2FtZQ"]


@pytest.mark.fuzz
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=6), max_size=14).map("".join))
@example("password=hunter2 and more")
@example("--token abc123")
@example("id deadbeef9 here")
@example("u:-xpass=1")
@example("x a1b2c3d4e5f6g7h8i9j0")
@example("https://me:pw@host/")
@FUZZ
def test_a_string_the_fast_path_keeps_is_one_the_full_rules_keep(text):
    if not may_hold_secret(text):
        assert spans.redact_text(text) == text


def test_a_token_prefix_is_seen_even_inside_a_secret_word() -> None:
    """Every string with a token prefix or key block takes the full rules, also where a named word runs into it
    ("authf_..." holds "hf_" inside "auth"): a search whose matches cannot overlap would miss those."""
    from guardrail.core.runstore.recorder import _NAMED, _STRONG

    for strong in _STRONG:
        for word in _NAMED:
            for cut in range(len(word)):
                text = f"x {word[:len(word) - cut]}{strong}abc"
                assert may_hold_secret(text), text


# Strings the fast path once let through unredacted (its context test lacked ``!=``, ``cred``, element tags, XML
# value pairs and the login commands' short options), found by the property test above.
@pytest.mark.parametrize("text", ["password!=hunter2", "creds=hunter2", "sshpass -p hunter2 ssh host",
                                  "docker login -p hunter2 registry", "redis-cli -a hunter2", "az login -p hunter2",
                                  "<password>hunter2</password>", 'name="api_token" value="hunter2"'])
def test_what_the_full_rules_mask_is_never_kept_by_the_fast_path(text: str) -> None:
    assert spans.redact_text(text) != text  # the rules mask it,
    assert may_hold_secret(text)  # so the fast path must hand it to them
