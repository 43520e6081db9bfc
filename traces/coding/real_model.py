"""A real model for the coding testbed: mini-swe-agent's own `LitellmModel` against an OpenAI-compatible endpoint.

``--model local:smollm2`` points mini-swe-agent's litellm model (its ``bash`` tool-calling path, the
one its default config uses) at `guardrail model serve` on loopback; nothing is fetched from the
network (litellm reads its bundled cost map). The small-model settings are those of the booking
testbed (`traces.models.EndpointSpec`): every reply must call the tool (mini-swe-agent refuses a reply
without one), one command per reply, the k-th call of a task carries seed ``task seed + k`` so report
and intervene start from the same samples. Observations are cut to `OBSERVATION_CHARS` and runs to
`STEP_LIMIT` model calls so a conversation fits the 4096-token context of the 135M model.
"""

from __future__ import annotations

import os
import random
from typing import Any

from traces.coding.agent import CodingRun, CodingTask
from traces.models import EndpointSpec

__all__ = ["MAX_TOKENS", "OBSERVATION_CHARS", "STEP_LIMIT", "SYSTEM_TEMPLATE", "endpoint_coding_model"]

STEP_LIMIT = 8
MAX_TOKENS = 128  # a command with a path and a flag or two; 64 cut some of them before the call closed
OBSERVATION_CHARS = 1000
SYSTEM_TEMPLATE = ("You are a helpful assistant that works in a Python project through a bash shell. "
                   "Reply with exactly one bash command through the bash tool. Each command runs in a new shell "
                   "in the project root. Commands look like: ls src/pkg, grep -n \"def name\" src/pkg/mod.py, "
                   "python -c \"from pkg.mod import name\", python -m pytest tests/test_mod.py::NameTests -q. "
                   "When the task is done, run: echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
OBSERVATION_TEMPLATE = ("{% if output.exception_info %}<exception>{{output.exception_info}}</exception>\n{% endif %}"
                        "<returncode>{{output.returncode}}</returncode>\n<output>\n"
                        "{{output.output[:" + str(OBSERVATION_CHARS) + "]}}</output>")


def endpoint_coding_model(spec: EndpointSpec, task: CodingTask, run: CodingRun, *, seed: int) -> Any:
    """mini-swe-agent's `LitellmModel` for `spec`'s server, counting calls and tokens into `run`."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the bundled cost map: never the network
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    import litellm
    from minisweagent.models.litellm_model import LitellmModel

    class CountingLitellmModel(LitellmModel):
        # A request the server refuses (a prompt past the context) fails the run at once instead of being
        # retried for minutes; mini-swe-agent records it as the run's exit status.
        abort_exceptions = [*LitellmModel.abort_exceptions, litellm.exceptions.BadRequestError]

        def __init__(self) -> None:
            super().__init__(
                model_name=f"openai/{spec.name}", cost_tracking="ignore_errors",
                observation_template=OBSERVATION_TEMPLATE,
                model_kwargs={"api_base": spec.endpoint, "api_key": os.environ.get("OPENAI_API_KEY", "local"),
                              "temperature": spec.temperature, "max_tokens": MAX_TOKENS, "tool_choice": "required",
                              "parallel_tool_calls": spec.parallel_tool_calls})
            self.first_seed = random.Random(f"coding:{seed}:{task.task_id}").randrange(2**30)
            self.commands: list[str] = []

        def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
            kwargs.setdefault("seed", self.first_seed + run.steps)
            run.steps += 1
            message = super().query(messages, **kwargs)
            usage = (message.get("extra", {}).get("response") or {}).get("usage") or {}
            run.tokens += int(usage.get("total_tokens") or 0)
            self.commands += [a["command"] for a in message.get("extra", {}).get("actions", [])]
            return message

    return CountingLitellmModel()
