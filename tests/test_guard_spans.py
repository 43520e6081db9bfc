"""Every hook call is a real OpenTelemetry span with GenAI attribute names, and content stays out unless opted in."""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.trace import StatusCode

from guardrail import Action, Finding, Guard, Layer, Result, Severity, Step, StepKind
from guardrail.core import spans as tm


class Gate(Layer):
    name = "gate"

    def before_action(self, ctx, action):
        return [Finding(layer=self.name, check="file_exists", predicate="file_exists", args=["a.csv"],
                        message="a.csv does not exist", blocking=True)]


class Monitor(Layer):
    name = "monitor"

    def on_step(self, ctx, step):
        ctx.record_score(self, 3.5)
        return [Finding(layer=self.name, check="esn_cusum", message="alarm", severity=Severity.ALARM, score=3.5)]


class Broken(Layer):
    name = "broken"

    def after_result(self, ctx, action, result):
        raise KeyError("boom")


def test_each_layer_hook_is_a_span_named_after_the_layer(spans):
    guard = Guard([Gate(), Monitor(), Broken()], mode="intervene")
    ep = guard.start_episode("ep-span")
    action = Action.tool_call("read_file", {"path": "a.csv"}, call_id="call-7")
    ep.before_action(action)
    ep.after_result(action, Result(output="x"))
    ep.on_step(Step(index=0, kind=StepKind.TOOL_CALL))
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert set(finished) == {"guardrail.gate", "guardrail.monitor", "guardrail.broken"}

    gate = finished["guardrail.gate"].attributes
    assert gate[tm.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert gate[tm.GEN_AI_TOOL_NAME] == "read_file"
    assert gate[tm.GEN_AI_TOOL_CALL_ID] == "call-7"
    assert gate[tm.GEN_AI_CONVERSATION_ID] == "ep-span"
    assert gate[tm.GUARDRAIL_DECISION] == "block"
    assert gate[tm.GUARDRAIL_FINDING_COUNT] == 1
    assert json.loads(gate[tm.GUARDRAIL_FINDINGS])[0]["check"] == "file_exists"

    monitor = finished["guardrail.monitor"].attributes
    assert monitor[tm.GUARDRAIL_SCORE] == 3.5
    assert monitor[tm.GUARDRAIL_DECISION] == "alarm"

    broken = finished["guardrail.broken"]
    assert broken.status.status_code is StatusCode.ERROR
    assert any(event.name == "exception" for event in broken.events)


def test_guard_spans_are_children_of_the_agents_current_span(spans):
    guard = Guard([Gate()])
    ep = guard.start_episode()
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("execute_tool read_file") as parent:
        ep.before_action(Action.tool_call("read_file", {"path": "a.csv"}))
    child = next(s for s in spans.get_finished_spans() if s.name == "guardrail.gate")
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id


def test_arguments_and_results_stay_off_spans_unless_opted_in(spans):
    secret_args = {"path": "a.csv", "api_key": "sk-abcdefghijklmnopqrstuvwx"}
    action = Action.tool_call("read_file", secret_args)
    Guard([Gate(), Broken()]).start_episode().before_action(action)
    for span in spans.get_finished_spans():
        assert tm.GEN_AI_TOOL_CALL_ARGUMENTS not in span.attributes
        assert "sk-abc" not in json.dumps(dict(span.attributes))

    spans.clear()
    guard = Guard([Gate(), Broken()], capture_content=True)
    ep = guard.start_episode()
    ep.before_action(action)
    ep.after_result(action, Result(output="token=supersecretvalue\n" + "x" * 5000))
    attrs = {s.name: s.attributes for s in spans.get_finished_spans()}
    captured = attrs["guardrail.gate"][tm.GEN_AI_TOOL_CALL_ARGUMENTS]
    assert "a.csv" in captured and "sk-abc" not in captured and "[REDACTED]" in captured
    result_attr = attrs["guardrail.broken"][tm.GEN_AI_TOOL_CALL_RESULT]
    assert "supersecretvalue" not in result_attr
    assert len(result_attr) < 2200 and "chars cut" in result_attr


def test_the_guard_works_with_no_exporter_configured():
    from opentelemetry.trace import NoOpTracer

    guard = Guard([Gate(), Monitor()], tracer=NoOpTracer())
    ep = guard.start_episode()
    assert ep.before_action(Action.shell("cat a.csv")).findings
    assert ep.on_step(Step(index=0, kind=StepKind.TEXT)).score == 3.5


def test_a_broken_span_processor_never_breaks_the_agent():
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Exploding(SpanProcessor):
        def on_start(self, span, parent_context=None):
            raise RuntimeError("processor start failed")

        def on_end(self, span):
            raise RuntimeError("processor end failed")

    provider = TracerProvider()
    provider.add_span_processor(Exploding())
    guard = Guard([Gate(), Monitor()], mode="intervene", tracer=provider.get_tracer("t"))
    ep = guard.start_episode()
    assert ep.before_action(Action.shell("cat a.csv")).blocked
    assert ep.on_step(Step(index=0, kind=StepKind.TEXT)).score == 3.5


# ---------------------------------------------------------------- capture_content on a user's own agents
# An agent of the test's own: a deploy helper that calls an HTTP tool with credentials in its arguments and
# reads back a service-account key file, and a weather tool whose ordinary result must stay readable.
_BEARER = "tEsT9vQ2mZ7xK4pL1nR8sW3yB6cD5fG0"
_DB_PASSWORD = "Xq7!pLm2#Rt9vZ"
_KEY_LINE = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7Zq8rT2mLx9Qw7Pk3"
_KEY_ID = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"
_SERVICE_ACCOUNT = json.dumps({
    "type": "service_account", "project_id": "acme-prod", "private_key_id": _KEY_ID,
    "private_key": f"-----BEGIN PRIVATE KEY-----\n{_KEY_LINE}\n-----END PRIVATE KEY-----\n",
    "client_email": "deployer@acme-prod.iam.gserviceaccount.com"}, indent=2)
_CONFIG_PASSWORD = "hV4nT8qW2eR6"
_ENV_PASSWORD = "Lk3Jh5Gf7Ds9Ap1"
_HTTP_ARGS = {"url": "https://api.example.com/v1/deploy", "headers": {"Authorization": f"Bearer {_BEARER}"},
              "body": json.dumps({"env": f"DB_HOST=db.internal\nDB_PASSWORD={_DB_PASSWORD}",
                                  "config": json.dumps({"db": {"password": _CONFIG_PASSWORD}})}),
              "containers": [{"env": [{"name": "DB_USER", "value": "app"},
                                      {"name": "DB_PASSWORD", "value": _ENV_PASSWORD}]}]}
_PLANTED = (_BEARER, _DB_PASSWORD, _KEY_LINE, _KEY_ID, _CONFIG_PASSWORD, _ENV_PASSWORD)


class Nothing(Layer):
    """A layer that looks at every call and result and finds nothing (each hook is still a span)."""

    name = "watch"

    def before_action(self, ctx, action):
        return None

    def after_result(self, ctx, action, result):
        return None


def _http_post(url: str, headers: dict, body: str) -> str:
    """POST a deploy request."""
    return "202 Accepted: deploy queued"


def _read_key(path: str) -> str:
    """Read a key file."""
    return _SERVICE_ACCOUNT


def _weather(city: str) -> str:
    """The weather in a city."""
    return f"Weather for {city}: light rain, 9°C, wind 7 m/s SW"


def _assert_spans_carry_content_but_no_secret(spans) -> None:
    from tests.hostile.spans import leaked

    ours = [s for s in spans.get_finished_spans() if s.name.startswith("guardrail.")]
    seen = "\n".join(json.dumps(dict(s.attributes), default=str, ensure_ascii=False) for s in ours)
    assert any(tm.GEN_AI_TOOL_CALL_RESULT in s.attributes for s in ours)
    for secret in _PLANTED:
        assert leaked(secret, seen) is None, secret
    assert "light rain, 9°C" in seen and "202 Accepted" in seen and "deployer@acme-prod" in seen
    arguments = [json.loads(s.attributes[tm.GEN_AI_TOOL_CALL_ARGUMENTS]) for s in ours
                 if s.attributes.get(tm.GEN_AI_TOOL_NAME) == "http_post" and tm.GEN_AI_TOOL_CALL_ARGUMENTS in s.attributes]
    # a span carries what redact_value gives a run store for the same arguments
    assert arguments and all(a == tm.redact_value(_HTTP_ARGS) for a in arguments)
    body = json.loads(arguments[0]["body"])
    assert body["env"] == "DB_HOST=db.internal\nDB_PASSWORD=[REDACTED]"
    assert json.loads(body["config"]) == {"db": {"password": "[REDACTED]"}}
    assert arguments[0]["containers"][0]["env"][0] == {"name": "DB_USER", "value": "app"}


def test_capture_content_on_a_langchain_agent_masks_its_secrets(spans):
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from adapters.langchain import GuardMiddleware

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    model = Scripted(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "http_post", "args": _HTTP_ARGS, "id": "c1"},
                                          {"name": "read_key", "args": {"path": "sa.json"}, "id": "c2"},
                                          {"name": "weather", "args": {"city": "Bergen"}, "id": "c3"}]),
        AIMessage(content="Deployed; it is raining in Bergen.")]))
    tools = [tool("http_post")(_http_post), tool("read_key")(_read_key), tool("weather")(_weather)]
    agent = create_agent(model, tools, middleware=[GuardMiddleware(Guard([Nothing()], capture_content=True))])
    agent.invoke({"messages": [{"role": "user", "content": "deploy, then tell me the weather"}]})
    _assert_spans_carry_content_but_no_secret(spans)


async def test_capture_content_on_an_autogen_agent_masks_its_secrets(spans):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, RequestUsage
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from adapters.autogen import AutoGenGuard

    calls = CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=5,
                         completion_tokens=7), content=[
        FunctionCall(id="c1", name="http_post", arguments=json.dumps(_HTTP_ARGS)),
        FunctionCall(id="c2", name="read_key", arguments='{"path": "sa.json"}'),
        FunctionCall(id="c3", name="weather", arguments='{"city": "Bergen"}')])
    client = ReplayChatCompletionClient([calls, "Deployed; it is raining in Bergen."], model_info={
        "vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
        "structured_output": False})
    guarded = AutoGenGuard(Guard([Nothing()], capture_content=True))
    tools = [FunctionTool(_http_post, description="POST a deploy request.", name="http_post"),
             FunctionTool(_read_key, description="Read a key file.", name="read_key"),
             FunctionTool(_weather, description="The weather in a city.", name="weather")]
    agent = AssistantAgent("deployer", model_client=guarded.model_client(client), workbench=guarded.workbench(tools),
                           reflect_on_tool_use=True)
    await guarded.afinish(await agent.run(task="deploy, then tell me the weather"))
    _assert_spans_carry_content_but_no_secret(spans)
