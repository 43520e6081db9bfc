"""The operations tests' own agent: an order-status assistant on LangChain and on AutoGen, with its own tools and
a scripted chat model that reads the tool results it got (nothing from the testbed).

The model looks the order up, asks for a shipping quote, and answers from both results. `shifted=True` changes
the tools' result shape (a new API version nests the fields and adds a paging envelope): the healthy agent
still answers right, but its steps no longer look like the ones the monitor was fitted on.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
              "structured_output": False}
COUNTRIES = ("FR", "DE", "JP", "BR", "CA", "IN")
STATUSES = ("packed", "shipped", "in transit", "awaiting pickup")


class Shop:
    """The tools' backend: deterministic per order id; `shifted` is the new result shape."""

    def __init__(self, shifted: bool = False) -> None:
        self.shifted = shifted
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def lookup_order(self, order_id: str) -> str:
        self.calls.append(("lookup_order", {"order_id": order_id}))
        rng = random.Random(order_id)
        order = {"order_id": order_id, "status": rng.choice(STATUSES), "items": rng.randint(1, 6),
                 "total": round(rng.uniform(12, 480), 2)}
        if self.shifted:
            return json.dumps({"api": "v2", "data": {"orders": [{"id": order_id, "attributes": {
                "fulfilment": {"state": order["status"].upper()}, "lineItems": [{"sku": f"SKU-{i}"} for i in
                                                                               range(order["items"])],
                "amount": {"value": str(order["total"]), "currency": "EUR"}}}]},
                "paging": {"cursor": None, "page": 1}})
        return json.dumps(order)

    def shipping_quote(self, order_id: str, country: str) -> str:
        self.calls.append(("shipping_quote", {"order_id": order_id, "country": country}))
        rng = random.Random(order_id + country)
        quote = {"carrier": rng.choice(("DHL", "UPS", "La Poste")), "days": rng.randint(1, 9),
                 "price": round(rng.uniform(4, 40), 2)}
        if self.shifted:
            return json.dumps({"api": "v2", "data": {"quotes": [{"attributes": {"provider": {"name": quote["carrier"]},
                                                                              "eta": {"businessDays": quote["days"]},
                                                                              "cost": str(quote["price"])}}]},
                               "paging": {"cursor": None, "page": 1}})
        return json.dumps(quote)

    def langchain_tools(self) -> list[Any]:
        def lookup_order(order_id: str) -> str:
            """Look up an order by id: status, number of items and total."""
            return self.lookup_order(order_id)

        def shipping_quote(order_id: str, country: str) -> str:
            """A shipping quote for an order to a country (ISO code)."""
            return self.shipping_quote(order_id, country)

        return [StructuredTool.from_function(lookup_order), StructuredTool.from_function(shipping_quote)]

    def autogen_tools(self) -> list[Any]:
        def lookup_order(order_id: str) -> str:
            """Look up an order by id: status, number of items and total."""
            return self.lookup_order(order_id)

        def shipping_quote(order_id: str, country: str) -> str:
            """A shipping quote for an order to a country (ISO code)."""
            return self.shipping_quote(order_id, country)

        return [FunctionTool(lookup_order, description="Look up an order by id."),
                FunctionTool(shipping_quote, description="A shipping quote for an order to a country.")]


def task_text(seed: int) -> str:
    rng = random.Random(seed)
    order = f"A{rng.randint(10000, 99999)}"
    country = rng.choice(COUNTRIES)
    phrasing = rng.choice(("Where is my order {o}, and what would shipping to {c} cost?",
                           "Order {o}: what is its status and the shipping price to {c}?",
                           "Please check order {o} and quote delivery to {c}."))
    return phrasing.format(o=order, c=country)


def _find(value: Any, *keys: str) -> Any:
    """The first value under any of `keys`, searching nested objects (the model copes with either shape)."""
    if isinstance(value, dict):
        for key in keys:
            if key in value and not isinstance(value[key], dict | list):
                return value[key]
        for item in value.values():
            found = _find(item, *keys)
            if found is not None:
                return found
    if isinstance(value, list):
        for item in value:
            found = _find(item, *keys)
            if found is not None:
                return found
    return None


def next_move(task: str, results: list[tuple[str, str]], seed: int) -> tuple[str, Any]:
    """The scripted model's policy: ("call", (name, args)) or ("answer", text), from the task and results so far."""
    order = re.search(r"\bA\d{5}\b", task)
    country = re.search(r"\b(" + "|".join(COUNTRIES) + r")\b", task)
    order_id, dest = (order.group(0) if order else "A00000"), (country.group(1) if country else "FR")
    done = [name for name, _ in results]
    if "lookup_order" not in done:
        return "call", ("lookup_order", {"order_id": order_id})
    if "shipping_quote" not in done:
        return "call", ("shipping_quote", {"order_id": order_id, "country": dest})
    parsed = {}
    for name, text in results:
        try:
            parsed[name] = json.loads(text)
        except (TypeError, ValueError):
            parsed[name] = {}
    status = _find(parsed.get("lookup_order"), "status", "state")
    total = _find(parsed.get("lookup_order"), "total", "value")
    carrier = _find(parsed.get("shipping_quote"), "carrier", "name")
    days = _find(parsed.get("shipping_quote"), "days", "businessDays")
    price = _find(parsed.get("shipping_quote"), "price", "cost")
    rng = random.Random(seed)
    opener = rng.choice(("Here is what I found.", "I checked your order.", "Done."))
    return "answer", (f"{opener} Order {order_id} is {str(status).lower()} (total {total}). Shipping to {dest} with "
                      f"{carrier} takes {days} days and costs {price}.")


class OrderChatModel(BaseChatModel):
    """A LangChain chat model that plays `next_move` over the conversation it is given; `sloppy` sends its first
    lookup with the order id as a number (a call its tool's schema refuses: the gate says so)."""

    seed: int = 0
    sloppy: bool = False

    @property
    def _llm_type(self) -> str:
        return "scripted-order-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        task = next((str(m.content) for m in messages if getattr(m, "type", "") == "human"), "")
        names = {}
        for message in messages:
            for call in getattr(message, "tool_calls", None) or []:
                names[call["id"]] = call["name"]
        results = [(names.get(m.tool_call_id, m.name or ""), str(m.content)) for m in messages
                   if isinstance(m, ToolMessage)]
        kind, move = next_move(task, results, self.seed)
        if kind == "call":
            name, args = move
            if self.sloppy and not results:
                args = {**args, "order_id": int(str(args["order_id"]).lstrip("A") or 0)}
            message = AIMessage(content="", tool_calls=[{"name": name, "args": args,
                                                         "id": f"call-{self.seed}-{len(results)}"}])
        else:
            message = AIMessage(content=move)
        return ChatResult(generations=[ChatGeneration(message=message)])


class OrderClient(ReplayChatCompletionClient):
    """An AutoGen model client that plays `next_move` over the messages it is given."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__([], model_info=MODEL_INFO)
        self.seed = seed

    async def create(self, messages: Any, *args: Any, **kwargs: Any) -> CreateResult:
        task = ""
        results: list[tuple[str, str]] = []
        for message in messages:
            content = getattr(message, "content", None)
            if getattr(message, "source", None) == "user" and isinstance(content, str) and not task:
                task = content
            if isinstance(content, list):
                for item in content:
                    if hasattr(item, "call_id") and hasattr(item, "content"):
                        results.append((getattr(item, "name", "") or "", str(item.content)))
        kind, move = next_move(task, results, self.seed)
        usage = RequestUsage(prompt_tokens=20, completion_tokens=12)
        if kind == "call":
            name, args = move
            result = CreateResult(finish_reason="function_calls", cached=False, usage=usage,
                                  content=[FunctionCall(id=f"call-{self.seed}-{len(results)}", name=name,
                                                        arguments=json.dumps(args))])
        else:
            result = CreateResult(finish_reason="stop", cached=False, usage=usage, content=move)
        self._cur_usage = usage
        return result


def run_langchain(guard: Any, seed: int, shop: Shop, *, sloppy: bool = False) -> str:
    """One LangChain create_agent run under `guard`; its answer."""
    from langchain.agents import create_agent

    agent = guard.bind(create_agent(OrderChatModel(seed=seed, sloppy=sloppy), shop.langchain_tools(),
                                    middleware=guard.langchain_middleware()))
    state = agent.invoke({"messages": [{"role": "user", "content": task_text(seed)}]})
    return str(state["messages"][-1].content)


async def run_autogen(guard: Any, seed: int, shop: Shop) -> str:
    """One AutoGen AssistantAgent run under `guard`; its answer."""
    from autogen_agentchat.agents import AssistantAgent

    from adapters.autogen import AutoGenGuard

    guarded = AutoGenGuard(guard, task=task_text(seed))
    agent = AssistantAgent("orders", model_client=guarded.model_client(OrderClient(seed)),
                           workbench=guarded.workbench(shop.autogen_tools()), max_tool_iterations=5)
    result = await agent.run(task=task_text(seed))
    await guarded.afinish(result)
    return str(result.messages[-1].content)


FIT_RUNS = 40


def fitted_models(tmp_path_factory: Any) -> Any:
    """monitor.npz (the default monitor) and next.npz (another preset) fitted on 40 healthy runs of both frameworks,
    once per test session (every module asking gets the same files)."""
    import asyncio
    import fcntl

    from guardrail import Guard
    from guardrail.core.cli import main

    root = tmp_path_factory.getbasetemp() / "operate-models"
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "next.npz").is_file():
            return root
        store = f"sqlite:///{root / 'fit.db'}"
        guard = Guard.default(record=store)
        for seed in range(FIT_RUNS // 2):
            run_langchain(guard, seed, Shop())
        for seed in range(FIT_RUNS // 2, FIT_RUNS):
            asyncio.run(run_autogen(guard, seed, Shop()))
        guard.close()
        assert main(["label", store, "--clean-as", "healthy"]) == 0
        assert main(["fit", store, "-o", str(root / "monitor.npz"), "--quiet"]) == 0
        assert main(["fit", store, "-o", str(root / "next.npz"), "--monitor", "hybrid", "--quiet"]) == 0
    return root
