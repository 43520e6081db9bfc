"""Fuzzing the foundation's entry points: nothing an agent or a corrupt file holds escapes as a crash."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from guardrail import Action, Episode, Finding, Guard, Layer, Result, Step, StepKind, ToolEvent
from guardrail.core.corpus import parse_tool_text, read_corpus, step_from_sentinel, write_corpus
from guardrail.core.spans import redact
from tests.fuzzing import FUZZ, json_values, nasty_text

pytestmark = pytest.mark.fuzz


class Echo(Layer):
    """A layer that reads every field it is given (so odd values reach real code)."""

    name = "echo"

    def before_action(self, ctx, action):
        return [Finding(layer=self.name, check="seen", message=action.describe())]

    def after_result(self, ctx, action, result):
        return [Finding(layer=self.name, check="seen", message=result.output[:100])]

    def on_step(self, ctx, step):
        ctx.record_score(self, float(len(step.text)))
        return None


@FUZZ
@given(raw=json_values)
def test_any_json_as_an_action_validates_or_names_the_problem(raw):
    try:
        Action.model_validate(raw)
    except ValidationError as exc:
        assert exc.errors()  # a structured, readable error, never another exception type


@FUZZ
@given(tool=nasty_text, args=json_values | nasty_text)
def test_any_tool_arguments_validate_or_name_the_problem(tool, args):
    try:
        action = Action(kind="tool", tool=tool, args=args)
    except ValidationError as exc:
        assert "args" in str(exc) or "tool" in str(exc)
    else:
        assert isinstance(action.args, dict)


@FUZZ
@given(command=nasty_text, output=nasty_text, text=nasty_text)
def test_the_guard_takes_any_strings_with_content_capture_on(command, output, text):
    guard = Guard([Echo()], mode="intervene", capture_content=True)
    ctx = guard.start_episode()
    action = Action.shell(command)
    assert ctx.before_action(action).allowed
    ctx.after_result(action, Result(output=output))
    ctx.on_step(Step(index=0, kind=StepKind.TEXT, text=text))
    ctx.finish(answer=text)
    assert len(ctx.episode.steps) == 2


@FUZZ
@given(text=nasty_text)
def test_parsing_tool_text_never_raises(text):
    for event in parse_tool_text(text) + parse_tool_text("[f(" + text + ") -> " + text + "]"):
        assert isinstance(event, ToolEvent)


@FUZZ
@given(line=json_values)
def test_any_sentinel_step_line_imports_or_raises_a_reported_error(line):
    try:
        step_from_sentinel(line, 0)  # type: ignore[arg-type]
    except (ValidationError, TypeError, ValueError, AttributeError):
        pass  # exactly the errors the reader turns into a CorpusIssue with file:line


@FUZZ
@given(garbage=st.lists(st.binary(max_size=80).map(lambda b: b.replace(b"\n", b" ")), max_size=6), text=nasty_text)
def test_a_corpus_with_garbage_lines_loads_the_good_ones_and_lists_the_bad(garbage, text):
    with tempfile.TemporaryDirectory() as tmp:
        episode = Episode(episode_id="e", steps=[Step(index=0, kind=StepKind.FINAL, text=text)])
        write_corpus(tmp, [episode])
        path = Path(tmp) / "e.jsonl"
        good = path.read_bytes()
        path.write_bytes(good + b"\n".join(garbage) + b"\n")
        corpus = read_corpus(tmp)
        assert corpus.episodes[0].steps[0].text == text  # lossless, surrogates included
        bad_lines = 0
        for raw in garbage:
            try:
                value = json.loads(raw) if raw.strip() else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                bad_lines += 1
                continue
            if value is not None:
                try:
                    Step.model_validate(value)
                except ValidationError:
                    bad_lines += 1
        line_issues = [i for i in corpus.issues if i.line is not None]
        assert len(line_issues) == bad_lines


@FUZZ
@given(value=json_values, cap=st.integers(min_value=1, max_value=500))
def test_redaction_is_total_and_capped(value, cap):
    out = redact(value, cap=cap)
    assert isinstance(out, str)
    assert len(out) <= cap + 40


def test_a_ten_megabyte_argument_is_handled_without_copying_it_onto_spans(spans):
    huge = "A" * (10 * 1024 * 1024)
    guard = Guard([Echo()], capture_content=True)
    ctx = guard.start_episode()
    action = Action.tool_call("write_file", {"path": "big.txt", "content": huge + "\x00"})
    decision = ctx.before_action(action)
    assert decision.allowed
    for span in spans.get_finished_spans():
        for value in span.attributes.values():
            assert not isinstance(value, str) or len(value) < 5000
