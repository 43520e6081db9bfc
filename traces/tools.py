"""Real tools for the testbed: a booking domain over SQLite, a calculator, a workspace reader and FTS5 document search.

The booking database is built from the shipped seed file ``traces/data/booking_seed.json``
(flights, hotels, weather, a catalog and a small document set). Every tool is a plain typed
Python function; `ToolBox` wraps them for LangChain (`StructuredTool`) and AutoGen
(`FunctionTool`) so both frameworks run the very same code, and an optional `ToolFault`
(the injectors) sits between the framework and the tool, counting calls so an injected
failure has a recorded onset.

A tool error is raised as `ToolError` (a LangChain `ToolException`): LangChain turns it into a
``ToolMessage(status="error")`` and AutoGen's workbench into ``is_error=True``; either way the
agent reads the message and the run continues.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langchain_core.tools import ToolException

__all__ = [
    "BOOKING_TOOLS",
    "DATA_DIR",
    "DEFAULT_SEED",
    "DEFAULT_WORKSPACE",
    "BookingDB",
    "ToolBox",
    "ToolCallRecord",
    "ToolError",
    "ToolFault",
    "ToolOutcome",
    "booking_tools",
    "evaluate_expression",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_SEED = DATA_DIR / "booking_seed.json"
DEFAULT_WORKSPACE = DATA_DIR / "workspace"
SEED_FORMAT = "guardrail-booking-seed"
SEED_VERSION = 1

BOOKING_TOOLS = ("lookup_flight", "lookup_hotel", "get_weather", "search_catalog", "calculator",
                 "search_docs", "read_file")

# Bounds on untrusted input: tool arguments come from a model.
MAX_ARG_CHARS = 500
MAX_FILE_BYTES = 64 * 1024
MAX_EXPRESSION_NODES = 200


class ToolError(ToolException):
    """A tool failed in a way the agent should read (bad argument, unknown city, injected outage)."""


# --------------------------------------------------------------------------- database
class BookingDB:
    """The booking domain in a real SQLite database (in memory by default), built from the seed file."""

    def __init__(self, path: str | Path = ":memory:", *, seed_file: str | Path = DEFAULT_SEED) -> None:
        self.path = str(path)
        self.seed_file = Path(seed_file)
        # Tools may run on a framework's worker threads; one connection guarded by a lock is enough here.
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False)
        seed = json.loads(self.seed_file.read_text(encoding="utf-8"))
        if seed.get("format") != SEED_FORMAT or seed.get("version") != SEED_VERSION:
            raise ValueError(f"{self.seed_file}: not a {SEED_FORMAT} v{SEED_VERSION} seed file")
        self.cities: list[str] = list(seed["cities"])
        self._load(seed)

    def _load(self, seed: dict[str, Any]) -> None:
        c = self._conn
        c.executescript(
            """
            DROP TABLE IF EXISTS flights; DROP TABLE IF EXISTS hotels; DROP TABLE IF EXISTS weather;
            DROP TABLE IF EXISTS catalog; DROP TABLE IF EXISTS documents;
            CREATE TABLE flights (origin TEXT, destination TEXT, price_usd INTEGER, PRIMARY KEY (origin, destination));
            CREATE TABLE hotels (city TEXT PRIMARY KEY, name TEXT, price_per_night_usd INTEGER);
            CREATE TABLE weather (city TEXT PRIMARY KEY, condition TEXT, temp_c INTEGER);
            CREATE TABLE catalog (sku TEXT PRIMARY KEY, name TEXT, price_usd INTEGER);
            CREATE VIRTUAL TABLE documents USING fts5(doc_id UNINDEXED, title, body);
            """
        )
        c.executemany("INSERT INTO flights VALUES (?, ?, ?)",
                      [(f["origin"], f["destination"], f["price_usd"]) for f in seed["flights"]])
        c.executemany("INSERT INTO hotels VALUES (?, ?, ?)",
                      [(h["city"], h["name"], h["price_per_night_usd"]) for h in seed["hotels"]])
        c.executemany("INSERT INTO weather VALUES (?, ?, ?)",
                      [(w["city"], w["condition"], w["temp_c"]) for w in seed["weather"]])
        c.executemany("INSERT INTO catalog VALUES (?, ?, ?)",
                      [(i["sku"], i["name"], i["price_usd"]) for i in seed["catalog"]])
        c.executemany("INSERT INTO documents VALUES (?, ?, ?)",
                      [(d["doc_id"], d["title"], d["body"]) for d in seed["documents"]])
        c.commit()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._conn.execute(sql, tuple(params)).fetchall())

    # Ground-truth reads (the task generator and labeller use these; agents go through the tools).
    def flight_price(self, origin: str, destination: str) -> int | None:
        rows = self.query("SELECT price_usd FROM flights WHERE origin = ? AND destination = ?", (origin, destination))
        return int(rows[0][0]) if rows else None

    def hotel_price(self, city: str) -> int | None:
        rows = self.query("SELECT price_per_night_usd FROM hotels WHERE city = ?", (city,))
        return int(rows[0][0]) if rows else None

    def weather(self, city: str) -> str | None:
        rows = self.query("SELECT condition FROM weather WHERE city = ?", (city,))
        return str(rows[0][0]) if rows else None

    def catalog_items(self) -> list[tuple[str, str, int]]:
        return [(str(s), str(n), int(p)) for s, n, p in self.query("SELECT sku, name, price_usd FROM catalog ORDER BY sku")]

    def document(self, doc_id: str) -> tuple[str, str] | None:
        rows = self.query("SELECT title, body FROM documents WHERE doc_id = ?", (doc_id,))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# --------------------------------------------------------------------------- calculator
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "round": round, "abs": abs, "sum": lambda *a: sum(a)}


def evaluate_expression(expression: str) -> float:
    """Evaluate an arithmetic expression safely (numbers, + - * / // % **, min/max/round/abs/sum); raise ValueError."""
    if len(expression) > MAX_ARG_CHARS:
        raise ValueError(f"expression longer than {MAX_ARG_CHARS} characters")
    # Strip currency signs and thousands separators ("$1,250"), keeping the commas between min()/max() arguments.
    cleaned = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", expression.replace("$", ""))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # "1e" and friends: the SyntaxError below says it
            tree = ast.parse(cleaned, mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not an arithmetic expression: {getattr(exc, 'msg', None) or type(exc).__name__}") from exc
    if sum(1 for _ in ast.walk(tree)) > MAX_EXPRESSION_NODES:
        raise ValueError("expression too large")

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return float(node.value)  # floats throughout: magnitudes stay bounded (overflow raises, never grows)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 16:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
                and not node.keywords:
            return _FUNCTIONS[node.func.id](*(ev(a) for a in node.args))
        raise ValueError(f"unsupported element {type(node).__name__} in expression")

    try:
        value = ev(tree)
    except ZeroDivisionError as exc:
        raise ValueError("division by zero") from exc
    except OverflowError as exc:
        raise ValueError("result too large") from exc
    except (TypeError, RecursionError) as exc:  # min() with no arguments, absurd nesting
        raise ValueError(f"cannot evaluate: {exc}") from exc
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("expression did not give a finite number")
    return float(value)


def format_number(value: float) -> str:
    """Integers without a decimal point, everything else to two decimals (how the tools and the policy write figures)."""
    return str(int(round(value))) if abs(value - round(value)) < 1e-9 else f"{value:.2f}"


# --------------------------------------------------------------------------- the toolbox
@dataclass
class ToolOutcome:
    """What a tool call returned: the text the agent reads, whether it is an error, and which injector touched it."""

    text: str
    is_error: bool = False
    injected: str | None = None


@dataclass
class ToolCallRecord:
    """One call as the toolbox saw it (ordinal counts from 0 across the episode)."""

    ordinal: int
    name: str
    args: dict[str, Any]
    outcome: ToolOutcome
    latency_s: float


class ToolFault(Protocol):
    """An injector's hook: it may replace or alter the outcome of the call with this ordinal."""

    def intercept(self, ordinal: int, name: str, args: dict[str, Any],
                  run: Callable[[], ToolOutcome]) -> ToolOutcome: ...


@dataclass
class ToolBox:
    """The tools of one episode over one database and workspace, with an optional fault injector and a call log."""

    db: BookingDB
    workspace: Path = DEFAULT_WORKSPACE
    fault: ToolFault | None = None
    log: list[ToolCallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # ---- the tool functions (their signatures and docstrings become the frameworks' schemas)
    def lookup_flight(self, origin: str, destination: str) -> str:
        """Look up the one-way economy fare in USD between two cities."""
        return self._call("lookup_flight", {"origin": origin, "destination": destination})

    def lookup_hotel(self, city: str) -> str:
        """Look up the nightly rate in USD of the recommended hotel in a city."""
        return self._call("lookup_hotel", {"city": city})

    def get_weather(self, city: str) -> str:
        """Get the weather forecast for a city (sunny, mild, cloudy, rainy, windy or snowy)."""
        return self._call("get_weather", {"city": city})

    def search_catalog(self, query: str) -> str:
        """Search the travel-shop catalog by item name; returns matching items with SKU and price in USD."""
        return self._call("search_catalog", {"query": query})

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression (+ - * / and min, max, round, abs, sum)."""
        return self._call("calculator", {"expression": expression})

    def search_docs(self, query: str) -> str:
        """Full-text search over the travel policy documents; returns the best matching passages."""
        return self._call("search_docs", {"query": query})

    def read_file(self, path: str) -> str:
        """Read a text file from the traveller's workspace (a path relative to the workspace)."""
        return self._call("read_file", {"path": path})

    # ---- plumbing
    def functions(self, names: Sequence[str] | None = None) -> list[Callable[..., str]]:
        chosen = list(names or BOOKING_TOOLS)
        unknown = [n for n in chosen if n not in BOOKING_TOOLS]
        if unknown:
            raise ValueError(f"unknown tool(s) {unknown}; the testbed has {list(BOOKING_TOOLS)}")
        return [getattr(self, n) for n in chosen]

    def langchain_tools(self, names: Sequence[str] | None = None) -> list[Any]:
        """The tools as LangChain `StructuredTool`s (errors come back as ToolMessage(status="error"))."""
        from langchain_core.tools import StructuredTool

        return [StructuredTool.from_function(func=f, name=f.__name__, description=f.__doc__, handle_tool_error=True)
                for f in self.functions(names)]

    def autogen_tools(self, names: Sequence[str] | None = None) -> list[Any]:
        """The tools as AutoGen `FunctionTool`s (errors come back as is_error results)."""
        from autogen_core.tools import FunctionTool

        return [FunctionTool(f, description=f.__doc__ or f.__name__, name=f.__name__) for f in self.functions(names)]

    def _call(self, name: str, args: dict[str, Any]) -> str:
        with self._lock:
            ordinal = len(self.log)
            started = time.perf_counter()
            run = lambda: self._run(name, args)  # noqa: E731 - the injector decides whether the real tool runs
            try:
                outcome = self.fault.intercept(ordinal, name, args, run) if self.fault else run()
            except Exception as exc:  # noqa: BLE001 - an injector bug must not crash the agent under test
                outcome = ToolOutcome(f"Error: {name} failed: {exc}", is_error=True)
            self.log.append(ToolCallRecord(ordinal, name, dict(args), outcome, time.perf_counter() - started))
        if outcome.is_error:
            raise ToolError(outcome.text)
        return outcome.text

    def _run(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        for key, value in args.items():
            if not isinstance(value, str):
                return ToolOutcome(f"Error: argument {key!r} must be a string", is_error=True)
            if len(value) > MAX_ARG_CHARS:
                return ToolOutcome(f"Error: argument {key!r} is longer than {MAX_ARG_CHARS} characters", is_error=True)
        try:
            return _IMPLEMENTATIONS[name](self, **args)
        except TypeError as exc:
            return ToolOutcome(f"Error: bad arguments for {name}: {exc}", is_error=True)


def _city(db: BookingDB, raw: str) -> str | None:
    wanted = raw.strip().lower()
    return next((c for c in db.cities if c.lower() == wanted), None)


def _lookup_flight(box: ToolBox, origin: str, destination: str) -> ToolOutcome:
    a, b = _city(box.db, origin), _city(box.db, destination)
    if a is None or b is None:
        missing = origin if a is None else destination
        return ToolOutcome(f"Error: unknown city {missing!r}", is_error=True)
    price = box.db.flight_price(a, b)
    if price is None:
        return ToolOutcome(f"Error: no flight from {a} to {b}", is_error=True)
    return ToolOutcome(f"${price}")


def _lookup_hotel(box: ToolBox, city: str) -> ToolOutcome:
    name = _city(box.db, city)
    price = box.db.hotel_price(name) if name else None
    if price is None:
        return ToolOutcome(f"Error: no hotel found in {city!r}", is_error=True)
    return ToolOutcome(f"${price}/night")


def _get_weather(box: ToolBox, city: str) -> ToolOutcome:
    name = _city(box.db, city)
    condition = box.db.weather(name) if name else None
    if condition is None:
        return ToolOutcome(f"Error: no forecast for {city!r}", is_error=True)
    return ToolOutcome(condition)


def _search_catalog(box: ToolBox, query: str) -> ToolOutcome:
    words = [w for w in re.findall(r"[a-z0-9-]+", query.lower()) if len(w) > 1]
    if not words:
        return ToolOutcome("Error: empty catalog query", is_error=True)
    items = box.db.catalog_items()
    scored = sorted(((sum(w in name.lower() for w in words), sku, name, price) for sku, name, price in items),
                    key=lambda row: (-row[0], row[1]))
    hits = [row for row in scored if row[0] > 0][:3]
    if not hits:
        return ToolOutcome(f"No catalog items match {query!r}.")
    return ToolOutcome("; ".join(f"{name} ({sku}): ${price}" for _, sku, name, price in hits))


def _calculator(box: ToolBox, expression: str) -> ToolOutcome:
    try:
        return ToolOutcome(format_number(evaluate_expression(expression)))
    except ValueError as exc:
        return ToolOutcome(f"Error: {exc}", is_error=True)


def _search_docs(box: ToolBox, query: str) -> ToolOutcome:
    # FTS5 query syntax is not for models to write: keep the words, quote each, OR them.
    words = re.findall(r"[A-Za-z0-9]+", query)[:12]
    if not words:
        return ToolOutcome("Error: empty search query", is_error=True)
    match = " OR ".join(f'"{w}"' for w in words)
    rows = box.db.query("SELECT doc_id, title, body FROM documents WHERE documents MATCH ? ORDER BY rank LIMIT 2",
                        (match,))
    if not rows:
        return ToolOutcome(f"No documents match {query!r}.")
    return ToolOutcome(" | ".join(f"{doc_id}: {title}. {body}" for doc_id, title, body in rows))


def _read_file(box: ToolBox, path: str) -> ToolOutcome:
    root = box.workspace.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        return ToolOutcome(f"Error: {path!r} is outside the workspace", is_error=True)
    if not target.is_file():
        return ToolOutcome(f"Error: no such file {path!r} in the workspace", is_error=True)
    data = target.read_bytes()[:MAX_FILE_BYTES]
    return ToolOutcome(data.decode("utf-8", errors="replace"))


_IMPLEMENTATIONS: dict[str, Callable[..., ToolOutcome]] = {
    "lookup_flight": _lookup_flight,
    "lookup_hotel": _lookup_hotel,
    "get_weather": _get_weather,
    "search_catalog": _search_catalog,
    "calculator": _calculator,
    "search_docs": _search_docs,
    "read_file": _read_file,
}


def booking_tools(db: BookingDB | None = None, *, workspace: Path = DEFAULT_WORKSPACE,
                  fault: ToolFault | None = None) -> ToolBox:
    """A fresh `ToolBox` over `db` (a new in-memory database from the shipped seed when None)."""
    return ToolBox(db=db or BookingDB(), workspace=workspace, fault=fault)
