"""What every adapter shares: any tool call a model emits becomes an Action, and Guard failures never escape."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.common import action_from_call, safe_decision
from adapters.steps import build_step, tool_event
from guardrail import Guard, GuardError
from guardrail.core.corpus import format_tool_text
from guardrail.core.events import ActionKind, StepKind

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(["bash", "python", "lookup", "run_shell", ""]), args=_JSON | st.text(max_size=60))
def test_any_model_tool_call_becomes_an_action(name, args):
    action = action_from_call(name, args, "c1")

    assert action.call_id == "c1"
    assert isinstance(action.args, dict)


def test_shell_and_python_tools_become_commands_and_code():
    assert action_from_call("bash", {"command": "ls -la"}).kind is ActionKind.SHELL
    assert action_from_call("python", {"code": "print(1)"}).code == "print(1)"
    assert action_from_call("lookup", '{"city": "Oslo"}').args == {"city": "Oslo"}
    assert action_from_call("lookup", "not json").args == {"_raw": "not json"}  # kept, not dropped


def test_a_guard_misuse_is_a_finding_not_an_exception():
    guard = Guard([])
    ctx = guard.start_episode()
    guard.on_finish(ctx)

    decision = safe_decision("on_finish", lambda: guard.on_finish(ctx))  # finishing twice raises GuardError

    assert decision.allowed and decision.findings[0].check == "internal_error"
    assert GuardError.__name__ in decision.findings[0].message


def test_a_built_tool_step_has_the_corpus_text_and_error_flag():
    event = tool_event("1", "lookup", {"city": "Oslo"}, "Error: 503", is_error=True, latency_s=0.5)

    step = build_step(0, content="Looking up.", events=[event], model_latency_s=0.25, task="book Oslo")

    assert step.kind is StepKind.TOOL_CALL
    assert step.text == 'Looking up. [lookup({"city": "Oslo"}) -> Error: 503]' == "Looking up. " + format_tool_text([event])
    assert step.error and step.latency_s == 0.75 and step.task == "book Oslo"


def test_a_call_that_never_returned_is_not_an_error():
    assert tool_event("1", "lookup", {}, None, is_error=True).is_error is False
    assert build_step(1, content="", events=[tool_event("1", "lookup", {}, None)], task="t").task is None


def test_guard_default_assembles_the_layers_the_arguments_allow(tmp_path, sentinel_dir):
    from guardrail.core.corpus import read_corpus
    from monitors import StepMonitor
    from monitors.model_file import save_monitor

    healthy = read_corpus(sentinel_dir / "autogen7b").healthy()
    save_monitor(StepMonitor().fit(healthy[:8]).calibrate(healthy[8:14]), tmp_path / "m.npz")

    assert [layer.name for layer in Guard.default().layers] == ["gate"]  # declared tool schemas, zero config
    assert [layer.name for layer in Guard.default(disable=["gate"]).layers] == []
    assert [layer.name for layer in Guard.default(workspace=tmp_path).layers] == ["gate"]
    guard = Guard.default(workspace=tmp_path, model=tmp_path / "m.npz", spec="booking_tools", mode="intervene")
    assert [layer.name for layer in guard.layers] == ["gate", "monitor", "verifier"]
    assert guard.mode == "intervene"
