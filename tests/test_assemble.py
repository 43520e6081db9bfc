"""`Guard.default` assembles all five layers; each can be switched off by name; the LangChain wiring runs them all."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from guardrail import Guard
from guardrail.consistency import ToolSchema
from guardrail.core.corpus import read_corpus
from monitors import StepMonitor
from monitors.model_file import save_monitor
from traces.agents import build_langgraph_agent
from traces.bench.repair import task_spec
from traces.labeller import stated_total
from traces.models import ScriptedChatModel
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BOOKING_TOOLS, BookingDB, booking_tools

CORPUS = Path(__file__).resolve().parents[1] / "traces" / "corpora" / "testbed_langgraph"
SEED = 1


@pytest.fixture(scope="module")
def monitor_file(tmp_path_factory) -> Path:
    healthy = read_corpus(CORPUS).healthy()
    path = tmp_path_factory.mktemp("monitor") / "monitor.npz"
    save_monitor(StepMonitor().fit(healthy[:24]).calibrate(healthy[24:40]), path)
    return path


def everything(tmp_path: Path, monitor_file: Path, **options):
    task = make_task(SEED, db=BookingDB())
    box = booking_tools()
    schemas = [ToolSchema("search_catalog", deterministic=True, probe_args={"query": "sun hat"})]
    guard = Guard.default(workspace=tmp_path, model=monitor_file, spec=task_spec(task), n=3,
                          sandbox=box.langchain_tools(BOOKING_TOOLS), tool_schemas=schemas,
                          checkpointer=InMemorySaver(), mode="intervene", **options)
    return guard, task


def test_all_five_layers_are_assembled_in_pipeline_order(tmp_path, monitor_file):
    guard, _ = everything(tmp_path, monitor_file)

    assert guard.layer_names == ["gate", "consistency", "monitor", "verifier", "repair"]
    assert guard.sampling is not None and guard.sampling.n == 3
    assert guard.sampling.layer.gate.registry.status("search_catalog").value == "verified"  # probed at assembly
    assert guard.repairer is not None and guard.repairer.guard is guard


@pytest.mark.parametrize("off", ["gate", "consistency", "monitor", "verifier", "repair"])
def test_each_layer_can_be_switched_off_by_name(tmp_path, monitor_file, off):
    guard, _ = everything(tmp_path, monitor_file, disable=[off])

    assert off not in guard.layer_names and len(guard.layer_names) == 4
    assert (guard.sampling is None) == (off == "consistency")


def test_bad_options_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="unknown layers"):
        Guard.default(workspace=tmp_path, disable=["gates"])
    with pytest.raises(ValueError, match="sandbox="):
        Guard.default(n=5)
    with pytest.raises(ValueError, match=">= 2"):
        Guard.default(n=1, sandbox={})
    assert Guard.default(repair=True).layer_names == ["gate", "repair"]  # the gate holds declared tool schemas
    assert Guard.default().layer_names == ["gate"]


def test_the_langchain_wiring_runs_every_layer_and_repairs_inside_the_run(tmp_path, monitor_file):
    from tests.layers import AnswerCheck

    # The shipped spec of this catalog task has no total check; the test's answer check flags the slip.
    guard, task = everything(tmp_path, monitor_file, extra_layers=[AnswerCheck(make_task(SEED, db=BookingDB()))])
    policy = Policy(seed=SEED, arithmetic_rate=1.0)
    model = ScriptedChatModel(policy=policy)
    middleware = guard.langchain_middleware()
    graph = guard.bind(build_langgraph_agent(task, policy, toolbox=booking_tools(), model=model,
                                             checkpointer=guard.checkpointer, middleware=middleware))

    state = graph.invoke({"messages": [HumanMessage(task.prompt)]},
                         {"configurable": {"thread_id": "all-five"}, "recursion_limit": 90})

    sampled = middleware[1].sampler.steps
    assert sampled and all(step.decision is not None for step in sampled)  # every tool-calling step was sampled
    assert all(call.verdict is not None for step in sampled for call in step.calls)
    record = state["guardrail_repair"]
    assert record["outcome"] == "repaired"
    stated = stated_total(state["messages"][-1].content)
    assert stated is not None and abs(stated - task.expected_total) < 0.5
