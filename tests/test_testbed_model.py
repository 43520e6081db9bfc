"""The real model in the loop: the loopback server's chat format, grammar and validation, real-run labels, and
live runs of SmolLM2-135M through ChatOpenAI / AutoGen's OpenAI client (skipped with the install command when
the model or llama-cpp-python is not installed)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from guardrail.core.events import Episode
from traces.labeller import classify_real, grade_episode, stated_total
from traces.model_server import (
    INSTALL_HINT,
    _checked,
    file_sha256,
    parse_reply,
    render_prompt,
    tool_grammar,
)
from traces.models import EndpointSpec
from traces.tasks import SMALL_TASK_KINDS, FareGoal, TwoLegsGoal, make_task, parse_goal

FLIGHT = {"type": "function", "function": {
    "name": "lookup_flight", "description": "Look up the one-way economy fare in USD between two cities.",
    "parameters": {"type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
                   "required": ["origin", "destination"]}}}
HOTEL = {"type": "function", "function": {
    "name": "lookup_hotel", "description": "Look up the nightly rate in USD.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TASK = "What is the one-way economy fare from Prague to Lisbon? Report the total in USD."


# --------------------------------------------------------------------------- chat format (no model needed)
def test_prompt_lists_the_tools_and_renders_calls_and_results():
    messages = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": TASK},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "lookup_flight", "arguments": '{"origin": "Prague", "destination": "Lisbon"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "$232"}]
    prompt = render_prompt(messages, [FLIGHT, HOTEL])
    assert prompt.startswith("<|im_start|>system\nBe careful.\n\nYou can call these tools:\n- lookup_flight(origin, "
                             "destination): Look up the one-way economy fare in USD between two cities.\n- lookup_hotel(city)")
    assert '<tool_call>\n{"name": "lookup_flight", "arguments": {"origin": "Prague", "destination": "Lisbon"}}\n' \
           '</tool_call><|im_end|>' in prompt
    assert "<|im_start|>tool\nlookup_flight: $232<|im_end|>" in prompt  # the stock chatml template drops results
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "You can call" not in render_prompt(messages[:2])


def test_grammar_follows_tool_choice_and_parallel_calls():
    auto = tool_grammar([FLIGHT, HOTEL])
    assert auto is not None and auto.startswith("root ::= answer | calls\n")
    assert '("\\n" call)*' in auto
    single = tool_grammar([FLIGHT], parallel_tool_calls=False)
    assert single is not None and "calls ::= call\n" in single
    assert tool_grammar([FLIGHT], "required").startswith("root ::= calls\n")  # type: ignore[union-attr]
    named = tool_grammar([FLIGHT, HOTEL], {"type": "function", "function": {"name": "lookup_hotel"}})
    assert named is not None and "lookup_hotel" in named and "lookup_flight" not in named
    assert tool_grammar([FLIGHT], "none") is None and tool_grammar([]) is None
    with pytest.raises(ValueError, match="not among the tools"):
        tool_grammar([FLIGHT], {"type": "function", "function": {"name": "nope"}})


def test_grammar_compiles_in_llama_cpp():
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar", reason=f"llama-cpp-python missing: {INSTALL_HINT}")
    for choice in ("auto", "required"):
        llama_grammar.LlamaGrammar.from_string(tool_grammar([FLIGHT, HOTEL], choice), verbose=False)


def test_reply_parsing_keeps_complete_calls_only():
    content, calls = parse_reply('<tool_call>\n{"name": "lookup_hotel", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
                                 '<tool_call>\n{"name": "lookup_hotel", "arguments": {"ci')
    assert content is None and [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Oslo"}]
    assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert parse_reply(" The fare is $232. ") == ("The fare is $232.", [])
    assert parse_reply('<tool_call>\n{"name": "lookup_hotel", "argu') == ('<tool_call>\n{"name": "lookup_hotel", "argu', [])


@pytest.mark.parametrize(("request_body", "message"), [
    ({"messages": []}, "messages must be"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "seed": "1"}, "seed"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 99}, "n must"),
])
def test_requests_are_validated(request_body, message):
    with pytest.raises(ValueError, match=message):
        _checked(request_body)


def test_request_defaults_and_fields_used():
    checked = _checked({"messages": [{"role": "user", "content": "x"}], "seed": 7, "stop": "END",
                        "parallel_tool_calls": False, "logprobs": True, "top_logprobs": 2, "extra": "kept out"})
    assert checked["seed"] == 7 and checked["stop"] == ["END"] and checked["parallel_tool_calls"] is False
    assert checked["temperature"] == 0.7 and checked["max_tokens"] == 256 and checked["top_logprobs"] == 2


def test_endpoint_spec_names_and_provenance():
    with pytest.raises(ValueError, match="local:NAME"):
        EndpointSpec("smollm2")
    spec = EndpointSpec("local:smollm2", "http://127.0.0.1:1/v1", server={"model_sha256": "ab" * 32})
    described = spec.describe(seed=5)
    assert described["model_sha256"] == "ab" * 32 and described["seed"] == 5
    assert described["sampling"] == {"temperature": 0.2, "max_tokens": 64, "parallel_tool_calls": False,
                                     "first_turn_tool_choice": "required", "max_steps": 4}


# --------------------------------------------------------------------------- small tasks and real-run labels
def test_small_tasks_parse_back_and_have_ground_truth():
    kinds = set()
    for seed in range(20):
        task = make_task(seed, kinds=SMALL_TASK_KINDS)
        kinds.add(task.kind)
        assert parse_goal(task.prompt) == task.goal
        assert set(task.tools) == {c.tool for c in task.goal.calls()}  # the one lookup it needs
    assert kinds == set(SMALL_TASK_KINDS)
    assert TwoLegsGoal("Oslo", "Hanoi", "Perth").combine({"flight:Oslo>Hanoi": 834.0, "flight:Hanoi>Perth": 66.0}).total \
        == 900.0


def test_stated_total_reads_what_small_models_write():
    assert stated_total("The fare is $232 USD") == 232.0
    assert stated_total("It is 1,250.50 USD in total") == 1250.5
    assert stated_total("approximately $1,000USD.") == 1000.0
    assert stated_total("about 40 dollars") == 40.0
    assert stated_total("Total: $80. Breakdown: $40 and $40.") == 80.0
    assert stated_total("20 euros") is None


def _episode(task, calls, answer):
    """An episode whose steps are one call each, then the answer."""
    from adapters.steps import build_step, tool_event

    steps = [build_step(i, content="", events=[tool_event(f"c{i}", name, args, result)], final=False)
             for i, (name, args, result) in enumerate(calls)]
    if answer is not None:
        steps.append(build_step(len(steps), content=answer))
    return Episode(episode_id="e", steps=steps, task=task.prompt)


@pytest.fixture(scope="module")
def fare_task():
    from traces.tools import booking_tools

    box = booking_tools()
    goal = FareGoal("Prague", "Lisbon")
    from traces.tasks import PREAMBLE, Task, true_facts

    facts = true_facts(goal, box)
    return Task("fare-test", goal, PREAMBLE + goal.text(), goal.combine(facts).total, facts, 0)


@pytest.mark.parametrize(("calls", "answer", "label", "tau"), [
    ([("lookup_flight", {"origin": "Prague", "destination": "Lisbon"}, "$232")], "The fare is $232.", "healthy", None),
    ([("lookup_flight", {"origin": "Czechoslovakia", "destination": "Poland"}, "Error: unknown city")],
     "I could not find it.", "fabricated_argument", 0),
    ([("lookup_flight", {"origin": "Lisbon", "destination": "Prague"}, "$361")], "The fare is $361.",
     "fabricated_argument", 0),
    ([("lookup_hotel", {"city": "Lisbon"}, "$90/night")], "The fare is $90.", "wrong_tool", 0),
    ([("lookup_flight", {"origin": "Prague", "destination": "Lisbon"}, "$232")] * 3, None, "loop", 2),
    ([], "The fare is about $1,000 USD.", "hallucinated", 0),
    ([("lookup_flight", {"origin": "Prague", "destination": "Lisbon"}, "$232")], "Report the total in USD.",
     "incomplete", 1),
    ([("lookup_flight", {"origin": "Prague", "destination": "Lisbon"}, "$232")], "The fare is $2320.",
     "arithmetic_error", 1),
])
def test_real_runs_are_put_down_to_their_first_cause(fare_task, calls, answer, label, tau):
    episode = _episode(fare_task, calls, answer)
    got, got_tau, findings = classify_real(episode, fare_task, grade_episode(episode, fare_task))
    assert (got, got_tau) == (label, tau)
    assert findings["grade"] == grade_episode(episode, fare_task).label


def test_a_right_answer_after_a_slip_is_healthy_with_the_slip_recorded(fare_task):
    episode = _episode(fare_task, [("lookup_flight", {"origin": "Lisbon", "destination": "Prague"}, "$361"),
                                   ("lookup_flight", {"origin": "Prague", "destination": "Lisbon"}, "$232")],
                       "It is $232.")
    label, tau, findings = classify_real(episode, fare_task)
    assert (label, tau) == ("healthy", None) and findings["fabricated_argument"][0]["step"] == 0


# --------------------------------------------------------------------------- live: the model itself
def _post(base_url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_server_health_names_the_model_file_and_hash(local_model):
    base_url, info = local_model
    from traces.model_server import get_json, shipped_model_path

    assert info == get_json(base_url.removesuffix("/v1") + "/health")
    assert info["model_sha256"] == file_sha256(shipped_model_path()) and info["model_file"].endswith(".gguf")
    status, body = _post(base_url, {"messages": [{"role": "user", "content": "hi"}], "temperature": 9})
    assert status == 400 and "temperature" in body["error"]["message"]
    status, body = _post(base_url, {"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert status == 400 and "stream" in body["error"]["message"]


@pytest.mark.slow
def test_openai_client_gets_a_schema_valid_call_with_logprobs_and_seeds_repeat(local_model):
    from openai import OpenAI

    base_url, _ = local_model
    client = OpenAI(base_url=base_url, api_key="local")
    ask = {"model": "smollm2", "messages": [{"role": "user", "content": TASK}], "tools": [FLIGHT, HOTEL],
           "tool_choice": "required", "logprobs": True, "top_logprobs": 2, "seed": 11, "temperature": 0.7,
           "max_tokens": 48, "parallel_tool_calls": False}
    first = client.chat.completions.create(**ask)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0].function
    args = json.loads(call.arguments)
    assert call.name in ("lookup_flight", "lookup_hotel")
    assert set(args) == ({"origin", "destination"} if call.name == "lookup_flight" else {"city"})
    tokens = choice.logprobs.content
    assert tokens and all(t.logprob <= 0.0 for t in tokens) and len(tokens[0].top_logprobs) == 2
    assert "".join(t.token for t in tokens).startswith("<tool_call>")
    again = client.chat.completions.create(**ask)
    assert again.choices[0].message.tool_calls[0].function.arguments == call.arguments  # same seed, same call
    # The second request reuses the cached prompt (a batch-1 decode instead of a batched one): llama.cpp's
    # quantized kernels then give logprobs that differ slightly, not tokens in this case.
    assert [t.token for t in again.choices[0].logprobs.content] == [t.token for t in tokens]


@pytest.mark.slow
def test_one_live_guarded_episode_through_langgraph(local_model):
    from adapters.langchain import GuardMiddleware
    from guardrail import Guard
    from tests.layers import Recorder
    from traces.agents import real_model_middleware, run_langgraph_episode
    from traces.policy import Policy
    from traces.tools import booking_tools

    base_url, info = local_model
    spec = EndpointSpec("local:smollm2", base_url, max_steps=3, server=info)
    task = make_task(3, kinds=("fare",))
    recorder = Recorder()
    box = booking_tools()
    episode = run_langgraph_episode(task, Policy(seed=3), toolbox=box, model=spec.build("langgraph", seed=3),
                                    tools=task.tools, max_steps=spec.max_steps,
                                    middleware=[real_model_middleware("required"), GuardMiddleware(Guard([recorder]))])
    assert box.log, "the first turn must call a tool"
    assert episode.steps[0].tool_events and episode.steps[0].logprobs_available
    assert recorder.steps and recorder.steps[0].tool_events[0].name == box.log[0].name
    assert recorder.steps[0].token_logprobs == episode.steps[0].token_logprobs  # the guard saw the real logprobs
    assert len(recorder.episodes) == 1


@pytest.mark.slow
async def test_one_live_guarded_episode_through_autogen(local_model):
    from autogen_agentchat.agents import AssistantAgent

    from adapters.autogen import AutoGenGuard
    from guardrail import Guard
    from tests.layers import Recorder
    from traces.agents import SYSTEM_PROMPT
    from traces.tools import booking_tools

    base_url, info = local_model
    spec = EndpointSpec("local:smollm2", base_url, max_steps=3, server=info)
    task = make_task(3, kinds=("fare",))
    recorder = Recorder()
    guarded = AutoGenGuard(Guard([recorder]), task=task.prompt)
    box = booking_tools()
    client = spec.build("autogen", seed=3)
    agent = AssistantAgent("booking_agent", model_client=guarded.model_client(client),
                           workbench=guarded.workbench(box.autogen_tools(task.tools)), system_message=SYSTEM_PROMPT,
                           max_tool_iterations=spec.max_steps)
    result = await agent.run(task=task.prompt)
    await guarded.afinish(result)
    await client.close()
    assert box.log and client.results and client.results[0].logprobs
    assert recorder.steps and recorder.steps[0].tool_events and recorder.steps[0].logprobs_available
    assert len(recorder.episodes) == 1


@pytest.mark.slow
def test_model_info_command_prints_the_hash(local_model):
    command = Path(sys.executable).with_name("guardrail")
    out = subprocess.run([str(command), "model", "info"], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout)["model_sha256"] == local_model[1]["model_sha256"]


# --------------------------------------------------------------------------- a long collection resumes
def test_a_resumed_collection_runs_only_the_positions_left(tmp_path):
    from traces.collect import collect, write_collected

    first, _ = collect("langgraph", 4, 5, show_progress=False)
    resumed, _ = collect("langgraph", 4, 5, show_progress=False, done=(first[:2], []))
    assert [e.episode_id for e in resumed] == [e.episode_id for e in first]
    assert [e.steps[0].text for e in resumed[2:]] == [e.steps[0].text for e in first[2:]]
    write_collected(tmp_path / "c", "langgraph", 4, 5, show_progress=False)
    with pytest.raises(ValueError, match="seed"):
        write_collected(tmp_path / "c", "langgraph", 4, 6, show_progress=False, resume=True)
    again = write_collected(tmp_path / "c", "langgraph", 4, 5, show_progress=False, resume=True)
    assert len(again.episodes) + len(again.rejected) == 4


def test_consistency_measurement_counts_rejections_and_fabrications():
    from traces.bench.real import consistency_on_samples

    right = ("lookup_flight", {"origin": "Prague", "destination": "Lisbon"})
    planned = [right]
    cities = ["Oslo", "Quito", "Hanoi", "Dakar", "Perth"]
    plans = [
        {"samples": [right] * 5, "planned": planned},  # agreed and right: accepted
        {"samples": [("lookup_flight", {"origin": c, "destination": "Lisbon"}) for c in cities],
         "planned": planned},  # scattered, the executed one fabricated: rejected
        {"samples": [("lookup_flight", {"origin": "Lisbon", "destination": "Prague"})] * 5,
         "planned": planned},  # agreed on swapped arguments: fabricated, accepted
        {"samples": [right] + [("lookup_flight", {"origin": c, "destination": "Prague"}) for c in cities[:4]],
         "planned": planned},  # the executed one right, the rest scattered: a rejection of a right plan
    ]
    figures = consistency_on_samples(plans)
    assert figures["plans"] == 4 and figures["fabricated_plans"] == 2 and figures["rejected"] == 2
    assert figures["fabricated_rejected"] == "1/2" and figures["fabricated_accepted_share"] == 0.5
    assert figures["false_positive_share_of_rejections"] == 0.5


def test_a_resume_runs_again_what_todays_rules_keep(tmp_path):
    from guardrail.core.corpus import RejectedEntry, write_corpus
    from traces.collect import _earlier_run

    generator = {"framework": "langgraph", "n": 2, "seed": 1, "classes": ["healthy"], "healthy_share": 0.6,
                 "model": "local:smollm2", "model_provenance": {}}
    write_corpus(tmp_path, [], rejected=[
        RejectedEntry(episode_id="langgraph-healthy-0000", reason="run too short: T=1 < 2"),
        RejectedEntry(episode_id="langgraph-healthy-0001", reason="injector never fired: ...")], generator=generator)
    episodes, rejected = _earlier_run(tmp_path, generator)
    assert episodes == [] and rejected == []  # a real run whose injector never fired is now kept as its own run
    del generator["model_provenance"]  # the scripted collector: T >= 4, an injector must fire
    _, rejected = _earlier_run(tmp_path, generator)
    assert [r.episode_id for r in rejected] == ["langgraph-healthy-0000", "langgraph-healthy-0001"]


# --------------------------------------------------------------------------- bench real on the committed corpora
def test_bench_real_monitor_variants_fit_on_the_real_corpus():
    from guardrail.core.corpus import read_corpus
    from traces.bench.real import REAL, monitor_figures

    if not (REAL["langgraph"] / "manifest.json").is_file():
        pytest.skip(f"{REAL['langgraph']} is not committed here")
    figures = monitor_figures(read_corpus(REAL["langgraph"]).episodes, repeats=1)
    assert figures["uncertainty_only"]["channels"] == ["u"]  # the default monitor less what reads 'g'
    assert figures["without_uncertainty"]["channels"] == ["e", "m", "g"]
    assert all(0.5 < figures[v]["auroc"] <= 1.0 for v in figures)


def test_bench_real_fitted_spec_flags_no_held_out_healthy_run_and_covers_only_fitted_families():
    from guardrail.core.corpus import read_corpus
    from traces.bench.real import REAL, fitted_verifier_figures

    if not (REAL["langgraph"] / "manifest.json").is_file():
        pytest.skip(f"{REAL['langgraph']} is not committed here")
    figures = fitted_verifier_figures("real", read_corpus(REAL["langgraph"]).episodes, seed=0)
    assert figures["healthy_train"] == 26 and figures["healthy_test"] == 17
    assert figures["flagged"]["healthy"] == {"fitted": "0/17", "task_spec": "8/17"}
    assert figures["healthy_flagged_by_check"]["task_spec"]["total_consistency"] == "8/17"
    # The model never answered a nights or two_legs task right: no family is fitted for them.
    by_kind = figures["fitted_flagged_by_task_kind"]["incomplete"]
    assert by_kind["nights"].startswith("0/") and by_kind["two_legs"].startswith("0/")
    assert not by_kind["fare"].startswith("0/")


def test_bench_real_reports_a_repair_sample_per_framework_and_rung(capsys):
    """`guardrail bench real --what repair`: one record per framework and rung, in the bench's own record shape, with
    the invariants that hold for any model (original intact, nothing broken). A scripted OpenAI-compatible server
    stands in for the model here; `guardrail bench real` itself runs SmolLM2."""
    import argparse

    from traces.bench.real import BENCH
    from traces.openai_server import PolicyResponder, ScriptedLLMServer
    from traces.policy import Policy

    parser = argparse.ArgumentParser()
    BENCH.add_arguments(parser)
    with ScriptedLLMServer(PolicyResponder(Policy(seed=1, hallucinate_rate=1.0, hint_response="relevant"))) as server:
        args = parser.parse_args(["--what", "repair", "--repair-episodes", "1", "--framework", "langgraph",
                                  "--endpoint", server.openai_url, "--json"])
        assert BENCH.run(args) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(r["what"], r["framework"], r["rung"]) for r in records] == [
        ("repair", "langgraph", "resample"), ("repair", "langgraph", "adaptive")]
    for record in records:
        assert record["n"] == 1 and record["original_intact"] == 1 and record["broken"] == 0
        assert record["temperature"] == 0.7 and "model_sha256" in record
    assert records[1]["recovered"] == 1 and records[1]["p_vs_resample"] == 1.0  # the scripted policy follows the hint
