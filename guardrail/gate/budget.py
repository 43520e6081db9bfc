"""The hard deadline over one gate decision, and cost models that refuse work which would overrun it.

Python cannot interrupt C code (``ast.parse``) or a pure-Python parser mid-call, so the deadline is
kept two ways: loops check it (`check`), and every uninterruptible step first asks whether its
estimated cost still fits (`afford`). Both raise `BudgetExceeded`, which the gate turns into an
*unknown* predicate plus a ``budget_exceeded`` finding. Size caps bound the worst case of an
estimate that is wrong. The deadline of the decision in progress lives in a context variable, so
the index, the extractors and the prober see it without threading it through every call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["PARSE_COST", "SHELL_PARSE_COST", "BudgetExceeded", "CostModel", "Deadline", "afford", "check",
           "cold_work", "current", "python_parse_units", "within"]


class BudgetExceeded(Exception):
    """The decision's deadline passed, the next step would not fit in what is left of it, or (`limit`)
    the input is over a size cap that bounds the worst case of such a step."""

    def __init__(self, what: str, *, limit: bool = False) -> None:
        super().__init__(f"over the gate's size limit: {what}" if limit else f"the gate's time budget ran out ({what})")
        self.what = what
        self.limit = limit


class Deadline:
    """A point in `time.perf_counter()` time by which the decision must be made.

    `cold_s` is what the decision may spend, on top, on its own cold work: the first parse of a module of
    normal size, the first answer of the target interpreter, the first look at a standard module. That
    work is done once and cached (on disk too, `guardrail.gate.warm`), so a decision that needs it waits
    for it (`cold_work` credits the time spent back to the deadline, up to `cold_s` in all) instead of
    leaving its predicates unknown because the cache was cold. Work on pathological input (over the size
    caps, or an estimate past what is left) never gets the credit: the hard deadline bounds it.
    """

    def __init__(self, seconds: float, *, start: float | None = None, cold_s: float = 0.0) -> None:
        self.start = time.perf_counter() if start is None else start
        self.end = self.start + max(0.0, seconds)
        self.cold_left = max(0.0, cold_s)
        self.cold_spent = 0.0

    def cold_allowance(self) -> float:
        """Seconds cold work started now may take: what is left of its cold credit, plus half of what is left of
        the decision (the action's other predicates still get their turn)."""
        return max(0.0, self.remaining()) / 2 + self.cold_left

    @contextmanager
    def cold_work(self) -> Iterator[None]:
        """Run cold work; the time it takes is credited back to the deadline, up to what is left of `cold_s`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            credit = min(time.perf_counter() - started, self.cold_left)
            self.cold_left -= credit
            self.cold_spent += credit
            self.end += credit

    def remaining(self) -> float:
        return self.end - time.perf_counter()

    def expired(self) -> bool:
        return time.perf_counter() > self.end

    def check(self, what: str) -> None:
        if time.perf_counter() > self.end:
            raise BudgetExceeded(what)

    def afford(self, cost_s: float, what: str) -> None:
        """Raise unless `cost_s` more seconds of work still end before the deadline."""
        if time.perf_counter() + cost_s > self.end:
            raise BudgetExceeded(what)


_CURRENT: ContextVar[Deadline | None] = ContextVar("guardrail_gate_deadline", default=None)


def current() -> Deadline | None:
    return _CURRENT.get()


@contextmanager
def within(deadline: Deadline | None) -> Iterator[Deadline | None]:
    """Run the block under `deadline` (None: no deadline, e.g. building the index ahead of time)."""
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


def check(what: str) -> None:
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.check(what)


def afford(cost_s: float, what: str) -> None:
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.afford(cost_s, what)


@contextmanager
def cold_work() -> Iterator[float | None]:
    """`Deadline.cold_work` of the decision in progress; yields the seconds the work may take (None: no deadline)."""
    deadline = _CURRENT.get()
    if deadline is None:
        yield None
        return
    allowance = deadline.cold_allowance()
    with deadline.cold_work():
        yield allowance


class CostModel:
    """Seconds per unit of some uninterruptible work, learned from what it really took on this machine.

    Starts from a conservative rate and follows observed runs (an exponentially weighted mean),
    never below a quarter of the initial rate nor above ten times it, so a loaded machine makes estimates grow.
    """

    def __init__(self, name: str, initial_s_per_unit: float) -> None:
        self.name = name
        self.floor = initial_s_per_unit / 4.0
        self.ceiling = initial_s_per_unit * 10.0  # a few runs starved of CPU do not make every estimate refuse
        self.rate = initial_s_per_unit
        self._lock = threading.Lock()

    def estimate(self, units: float) -> float:
        return units * self.rate

    def afford(self, units: float, what: str) -> None:
        afford(self.estimate(units), what)

    def observe(self, units: float, seconds: float, *, min_units: float = 2_000) -> None:
        if units < min_units:  # tiny runs are dominated by fixed overhead
            return
        with self._lock:
            self.rate = min(self.ceiling, max(self.floor, 0.7 * self.rate + 0.3 * (seconds / units)))


_PARSE_MARKS = "([{.,=:+-*/%&|^<>~@;\n"


def python_parse_units(text: str) -> int:
    """A cheap stand-in for the AST node count of `text` (nodes and parse time grow with it)."""
    return sum(text.count(mark) for mark in _PARSE_MARKS) + 1


# ast.parse plus the index's walk: about 1-3 us per node and 1.2-3.3 nodes per unit above.
PARSE_COST = CostModel("python parse", 6e-6)
# tree-sitter-bash parses 0.5-10 us a character (long pipelines in $(...) are the slow end) and the walk over the
# tree adds a few microseconds a node; the parse is also cancelled at the deadline (`shell_syntax.parse`).
SHELL_PARSE_COST = CostModel("shell parse", 5e-6)
