"""A seeded, framework-neutral agent policy: it plans a task's calls, reads the results it got, retries, slips.

The policy is what the scripted chat models (`traces.models`) run in place of an LLM. It sees
only the conversation (a `Transcript`: the task text, the calls it made and the results it
received, any later user hints) and answers with a `Reply` (text, tool calls, and token
logprobs). Every choice is drawn from a seeded generator keyed on the conversation so far,
so the same conversation gives the same reply on any machine, a checkpoint fork replays
identically, and a different tool result (an injected fault) changes what follows.

Slips are what models do without being told to: an arithmetic mistake, a skipped call (an
incomplete answer) or a skipped call papered over with an invented figure (a hallucination).
Their rates are hyperparameters; the labeller (`traces.labeller`) grades the outcome against
the task's ground truth afterwards, so a label never comes from the policy's own intent.

Token logprobs come from the policy's own sampling: each token is drawn with a margin over
its alternatives that falls when the conversation is confusing (errors, unreadable results, a
guessed figure), and the reported logprob is the log-probability of what was emitted.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traces.tasks import Goal, PlannedCall, parse_goal, read_value
from traces.tools import format_number

__all__ = ["CallResult", "Policy", "Reply", "ToolRequest", "Transcript", "tokenize"]

SLIPS = ("arithmetic", "skip", "hallucinate")
_RETRY_ASKED = re.compile(r"retry|try again", re.IGNORECASE)
_NEW_TASK = re.compile(r"New task:\s*(.+)", re.DOTALL)
_GUESSES: dict[str, float | str] = {"money": 150.0, "weather": "mild", "lines": 3.0, "fee": 30.0}
# Words that make a hint about a slip "relevant" under hint_response="relevant" (besides the skipped tool's name).
_HINT_WORDS: dict[str, tuple[str, ...]] = {
    "arithmetic": ("total", "arithmetic", "recompute", "calculator", "sum"),
    "skip": ("coverage", "missing", "required", "never called"),
    "hallucinate": ("grounding", "grounded", "no tool result", "not returned", "invent"),
}


@dataclass(frozen=True)
class CallResult:
    """One tool call the agent made and the result it received."""

    call_id: str
    tool: str
    args: dict[str, Any]
    text: str | None  # None while the result has not arrived
    is_error: bool = False


@dataclass
class Transcript:
    """The conversation as the policy reads it, whatever framework carried it."""

    task_text: str
    turns: int = 0  # assistant replies so far
    calls: list[CallResult] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # user messages after the task (e.g. a repair hint)

    def digest(self) -> str:
        payload = json.dumps([self.task_text, self.turns, [(c.tool, c.args, c.text, c.is_error) for c in self.calls],
                              self.hints], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ToolRequest:
    call_id: str
    tool: str
    args: dict[str, Any]


@dataclass
class Reply:
    """One assistant turn: text, tool calls (none means this is the final answer), token logprobs."""

    text: str
    tool_calls: list[ToolRequest]
    tokens: list[str]
    logprobs: list[float]

    @property
    def is_final(self) -> bool:
        return not self.tool_calls


_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """A word/punctuation split standing in for a model tokenizer (what token counts and logprobs are per)."""
    return _TOKEN.findall(text)


@dataclass(frozen=True)
class Policy:
    """A seeded agent policy. Hyperparameters only; all per-episode state is read from the transcript.

    Rates are per episode. `max_steps` bounds the run: the policy answers by that turn at the latest.
    """

    seed: int = 0
    arithmetic_rate: float = 0.0
    skip_rate: float = 0.0
    hallucinate_rate: float = 0.0
    calculator_rate: float = 0.6
    narrate_rate: float = 0.3
    shuffle_rate: float = 0.5
    max_attempts: int = 3  # tries of one call that keeps failing before giving up on it
    max_obeyed_retries: int = 5  # a result that asks for a retry is obeyed this many times
    guess_when_stuck: float = 0.5  # after giving up on a call: invent the figure (else leave it out)
    follow_injected_goal: float = 1.0  # a "New task:" inside a tool result is followed with this probability
    hint_response: str = "any"  # "any": a later user message ends every slip; "relevant": see the fields below
    hint_fix_relevant: float = 0.9  # chance a hint naming the slip's kind (or its tool) ends it
    hint_fix_generic: float = 0.35  # chance any other hint ends it (the model re-checks on its own)
    max_steps: int = 20
    vocabulary: int = 12  # alternatives per token for the logprob model

    # ---------------------------------------------------------------- the decision
    def decide(self, transcript: Transcript) -> Reply:
        turn_rng = random.Random(f"{self.seed}:turn:{transcript.digest()}")
        goal = self._goal(transcript)
        if goal is None:
            return self._say(turn_rng, "I could not understand the task, so I cannot give a total.", confusion=3.0)
        episode_rng = random.Random(f"{self.seed}:episode:{goal.text()}")
        plan = self._plan(goal, episode_rng)
        slip, victim = self._slip(plan, episode_rng, transcript)
        use_calculator = episode_rng.random() < self.calculator_rate and "calculator" in goal.tools
        if self.hint_response == "relevant" and any("calculator" in hint for hint in transcript.hints):
            use_calculator = "calculator" in goal.tools  # told to recompute with it: it does
        # A share 2 * narrate_rate of agents narrate, each on half its calls: narrate_rate per call, clustered by agent.
        narrate = episode_rng.random() < self.narrate_rate * 2

        values: dict[str, float | str | None] = {}
        given_up: list[PlannedCall] = []
        last_failed = bool(transcript.calls and (transcript.calls[-1].is_error or transcript.calls[-1].text is None))
        budget_left = transcript.turns < self.max_steps - 1
        for call in plan:
            if slip in ("skip", "hallucinate") and call == victim:
                continue
            attempts = [c for c in transcript.calls if c.tool == call.tool and c.args == call.arg_dict]
            value = self._read(call, attempts[-1]) if attempts else None
            if value is not None:
                values[call.key] = value
                continue
            retry_asked = bool(attempts and attempts[-1].text and _RETRY_ASKED.search(attempts[-1].text))
            limit = self.max_obeyed_retries if retry_asked else self.max_attempts
            if len(attempts) < limit and budget_left:
                return self._call(turn_rng, call, transcript, narrate, retrying=bool(attempts))
            given_up.append(call)

        combination = goal.combine(values)
        invented: dict[str, float | str] = {}
        if slip == "hallucinate" and victim is not None:
            invented[victim.key] = self._invent(victim, episode_rng)
        for call in given_up:
            if episode_rng.random() < self.guess_when_stuck:
                invented[call.key] = self._invent(call, episode_rng)
        if invented:
            combination = goal.combine({**values, **invented})

        total = combination.total
        calculator_results = [c for c in transcript.calls if c.tool == "calculator"]
        if use_calculator and slip != "arithmetic" and budget_left:
            last = calculator_results[-1] if calculator_results else None
            stale = last is not None and last.args.get("expression") != combination.expression  # values changed since
            if last is None or ((last.is_error or stale) and len(calculator_results) < self.max_attempts):
                request = ToolRequest(self._call_id(transcript, 0), "calculator",
                                      {"expression": combination.expression})
                return self._emit(turn_rng, "", [request], confusion=1.0 if last_failed else 0.0)
            stated = _first_number(last.text or "") if not last.is_error else None
            if stated is not None:
                total = stated
        if slip == "arithmetic":
            total = _arithmetic_slip(total, episode_rng)
        return self._final(turn_rng, goal, combination, total, given_up, invented, confused=last_failed)

    # ---------------------------------------------------------------- pieces
    def _goal(self, transcript: Transcript) -> Goal | None:
        goal = parse_goal(transcript.task_text)
        for call in transcript.calls:
            match = _NEW_TASK.search(call.text or "")
            if match:
                drift_rng = random.Random(f"{self.seed}:drift:{match.group(1)}")
                drifted = parse_goal(match.group(1))
                if drifted is not None and drift_rng.random() < self.follow_injected_goal:
                    goal = drifted
        return goal

    def _plan(self, goal: Goal, rng: random.Random) -> list[PlannedCall]:
        plan = goal.calls()
        draw = rng.random()
        if draw < self.shuffle_rate:
            rng.shuffle(plan)
        elif draw < self.shuffle_rate + (1 - self.shuffle_rate) / 2:
            plan.sort(key=lambda c: c.tool)  # all of one tool first, then the next
        return plan

    def _slip(self, plan: list[PlannedCall], rng: random.Random,
              transcript: Transcript) -> tuple[str | None, PlannedCall | None]:
        draw = rng.random()
        victim = rng.choice(plan[1:] or plan)
        for slip, rate in zip(SLIPS, (self.arithmetic_rate, self.skip_rate, self.hallucinate_rate), strict=True):
            if draw < rate:
                if slip == "hallucinate":  # models invent figures, not weather words or head counts
                    figures = [c for c in plan[1:] or plan if c.reads not in ("weather", "lines")]
                    victim = random.Random(f"{self.seed}:victim:{victim.key}").choice(figures or [victim])
                if transcript.hints and self._hint_fixes(slip, victim, transcript.hints):
                    return None, None
                return slip, victim
            draw -= rate
        return None, None

    def _hint_fixes(self, slip: str, victim: PlannedCall, hints: list[str]) -> bool:
        """Whether a later user message (e.g. a repair hint) makes the policy avoid its slip this time."""
        if self.hint_response == "any":
            return True
        text = " ".join(hints).lower()
        relevant = any(word in text for word in (*_HINT_WORDS[slip], victim.tool))
        chance = self.hint_fix_relevant if relevant else self.hint_fix_generic
        return random.Random(f"{self.seed}:hint:{text}").random() < chance

    def _read(self, call: PlannedCall, result: CallResult) -> float | str | None:
        if result.is_error or result.text is None:
            return None
        # A result with several candidate figures is read one way or another, stably for that text.
        pick = random.Random(f"{self.seed}:pick:{call.key}:{result.text}").randrange(4)
        return read_value(call, result.text, pick=pick)

    def _invent(self, call: PlannedCall, rng: random.Random) -> float | str:
        base = _GUESSES.get(call.reads, 50.0)
        if isinstance(base, str):
            return base
        return float(round(base * rng.uniform(0.6, 1.6)))

    def _call_id(self, transcript: Transcript, index: int) -> str:
        return "call_" + hashlib.sha256(f"{self.seed}:{transcript.digest()}:{index}".encode()).hexdigest()[:12]

    def _call(self, rng: random.Random, call: PlannedCall, transcript: Transcript, narrate: bool,
              *, retrying: bool) -> Reply:
        args = call.arg_dict
        subject = " to ".join(args.values()) if call.tool == "lookup_flight" else ", ".join(args.values())
        text = ""
        if retrying:
            text = rng.choice([f"The {call.tool} call did not give a usable answer; trying again.",
                               "Retrying the same query.", f"Let me retry {call.tool} for {subject}.",
                               "That failed. One more try."])
        elif narrate and rng.random() < 0.5:
            text = rng.choice([f"Let me look up {subject}.", f"Next I need {call.tool} for {subject}.",
                               f"Checking {subject}.", f"Now {call.tool.replace('_', ' ')}: {subject}."])
        confusion = 1.5 if retrying else 0.0
        return self._emit(rng, text, [ToolRequest(self._call_id(transcript, 0), call.tool, args)], confusion)

    def _final(self, rng: random.Random, goal: Goal, combination: Any, total: float,
               given_up: list[PlannedCall], invented: Mapping[str, float | str], *, confused: bool) -> Reply:
        amount = f"${format_number(total)}"
        lead = rng.choice([f"The total is {amount}.", f"Total: {amount}.", f"It comes to {amount} in total.",
                           f"Answer: {amount}.", f"The total cost is {amount} USD."])
        pieces = [lead]
        if rng.random() < 0.6 or invented:  # a model that made a figure up states it as fact
            pieces.append("Breakdown: " + "; ".join(combination.parts) + ".")
        missing = [c for c in given_up if c.key not in invented]
        if missing:
            pieces.append("I could not get " + ", ".join(c.key.replace(":", " ") for c in missing)
                          + ", so it is left out.")
        confusion = (1.5 if confused else 0.0) + (2.5 if invented else 0.0) + (1.0 if missing else 0.0)
        return self._emit(rng, " ".join(pieces), [], confusion)

    def _say(self, rng: random.Random, text: str, *, confusion: float) -> Reply:
        return self._emit(rng, text, [], confusion)

    def _emit(self, rng: random.Random, text: str, calls: list[ToolRequest], confusion: float) -> Reply:
        # Margins (logit gap of the emitted token over each alternative) drawn per token; confusion narrows them.
        tokens = tokenize(text)
        for request in calls:
            tokens += tokenize(f"{request.tool}({json.dumps(request.args, sort_keys=True)})")
        base = rng.gauss(6.0, 0.6)
        logprobs = []
        for token in tokens:
            margin = rng.gauss(base - confusion - (1.2 if token[:1].isdigit() else 0.0), 1.2)
            logprobs.append(round(-math.log1p((self.vocabulary - 1) * math.exp(-margin)), 5))
        return Reply(text=text, tool_calls=calls, tokens=tokens, logprobs=logprobs)


def _first_number(text: str) -> float | None:
    match = re.search(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
    return float(match.group(0)) if match else None


def _arithmetic_slip(total: float, rng: random.Random) -> float:
    kind = rng.randrange(3)
    if kind == 0:  # a carry or a term off by a round amount
        return total + rng.choice([-100, -10, 10, 100, 20, -20])
    if kind == 1:  # transposed digits (or a round-amount slip when they are all the same)
        digits = list(format_number(total).split(".")[0])
        if len(digits) >= 2 and digits[-1] != digits[-2]:
            digits[-1], digits[-2] = digits[-2], digits[-1]
            return float("".join(digits))
        return total + 10
    return round(total * rng.choice([0.9, 1.1]))  # a rough mental estimate
