"""The benchmark sandbox: 12 real tools, three declared deterministic that are not (seed record 001).

The three are wrong for the record's reasons, with the real mechanism behind each:
``search_index`` ranks an SQLite FTS5 index that a writer thread keeps inserting into, so the
top hits and their order move under concurrent writes; ``read_config`` reads a JSON file that a
reloader thread rewrites in place (blue/green values, and a torn file mid-write); and
``resolve_user`` answers from a TTL cache in front of a directory that a sync thread updates,
so a batch that spans an expiry sees two versions of the user. The other seven deterministic
tools are honest (SQLite lookups, workspace files, a fixed rate table), and two tools are
nondeterministic by contract (the time, a random sample).

Each background thread runs on a timer (the benchmark) or only when `trigger()`ed (tests that
need a change to land between two particular calls).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guardrail.consistency.registry import ToolSchema

__all__ = ["MISDECLARED", "TRENDING", "ManualClock", "Sandbox", "TTLCache"]

MISDECLARED = ("search_index", "read_config", "resolve_user")

_VOCABULARY = (
    "deploy rollback canary latency cache index shard replica backup restore migrate schema "
    "queue worker retry timeout quota billing invoice refund ledger audit token session login"
).split()
# What people are writing about right now: the writer's new notes are short and use these words,
# so they land in the top hits of queries on them (BM25 favours short documents).
TRENDING = ("deploy", "rollback", "canary", "latency", "cache", "refund", "billing", "migrate")
_CURRENCY_RATES = {("EUR", "USD"): 1.08, ("USD", "EUR"): 0.93, ("GBP", "USD"): 1.27, ("USD", "GBP"): 0.79,
                   ("EUR", "GBP"): 0.85, ("GBP", "EUR"): 1.17, ("USD", "JPY"): 151.2, ("JPY", "USD"): 0.0066}
CONFIG_BLUE = {"db": {"pool_size": 10, "timeout_s": 30}, "region": "eu-west-1",
               "features": ["search", "billing"], "release": "blue"}
CONFIG_GREEN = {"db": {"pool_size": 12, "timeout_s": 45}, "region": "eu-west-1",
                "features": ["search", "billing", "refunds"], "release": "green"}


class TTLCache:
    """A read-through cache whose entries expire `ttl_s` after they were loaded."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Any]] = {}

    def get(self, key: str, load: Callable[[str], Any]) -> Any:
        now = self.clock()
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        value = load(key)  # misses raise and are not cached
        with self._lock:
            self._entries[key] = (now, value)
        return value


def _sandbox_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=10)
    # A throwaway sandbox needs no fsync per commit; with it, the writers would commit far slower than asked.
    conn.execute("PRAGMA synchronous=OFF")
    return conn


class ManualClock:
    """The harness's clock as the TTL cache sees it, advanced explicitly (see `Sandbox`)."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class _Churn(threading.Thread, ABC):
    """A background thread that changes shared state on a timer, or once per `trigger()`."""

    def __init__(self, name: str, interval_s: float | None) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s = interval_s
        self.changes = 0
        self._halt = threading.Event()
        self._wake = threading.Semaphore(0)
        self._done = threading.Condition()

    def setup(self) -> None:
        """Open what the thread needs (in the thread: SQLite connections belong to one)."""

    @abstractmethod
    def change(self) -> None:
        """Make one change to the shared state (subclasses say which)."""

    def teardown(self) -> None:
        """Close what `setup` opened."""

    def run(self) -> None:
        self.setup()
        try:
            while not self._halt.is_set():
                if self.interval_s is None:
                    if not self._wake.acquire(timeout=0.05):
                        continue
                elif self._halt.wait(self.interval_s):
                    break
                self.change()
                with self._done:
                    self.changes += 1
                    self._done.notify_all()
        finally:
            self.teardown()

    def trigger(self, timeout_s: float = 10.0) -> None:
        """Make the thread apply one change now and wait until it has."""
        with self._done:
            target = self.changes + 1
        self._wake.release()
        with self._done:
            if not self._done.wait_for(lambda: self.changes >= target, timeout_s):
                raise TimeoutError(f"{self.name} did not apply its change within {timeout_s} s")

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


class _IndexWriter(_Churn):
    """Inserts documents into the FTS5 index (and retires old ones) from its own connection."""

    def __init__(self, db_path: Path, interval_s: float | None, seed: int) -> None:
        super().__init__("search-index-writer", interval_s)
        self.db_path = db_path
        self.rng = random.Random(seed)
        self.conn: sqlite3.Connection | None = None

    def setup(self) -> None:
        self.conn = _sandbox_connection(self.db_path)

    def change(self) -> None:
        assert self.conn is not None
        topic = self.rng.choice(TRENDING)  # a short note on a hot topic: it ranks near the top for that topic
        words = " ".join([topic, topic, *self.rng.sample(TRENDING, self.rng.randint(0, 1))])
        with self.conn:
            self.conn.execute("INSERT INTO docs(title, body) VALUES (?, ?)", (f"note {self.changes}", words))
            self.conn.execute("DELETE FROM docs WHERE rowid IN (SELECT rowid FROM docs ORDER BY rowid LIMIT 1)")

    def teardown(self) -> None:
        if self.conn is not None:
            self.conn.close()


class _ConfigReloader(_Churn):
    """Rewrites the config file in place, alternating blue and green, the way a hot reload does."""

    def __init__(self, path: Path, interval_s: float | None) -> None:
        super().__init__("config-reloader", interval_s)
        self.path = path

    def change(self) -> None:
        text = json.dumps(CONFIG_GREEN if self.changes % 2 == 0 else CONFIG_BLUE, indent=1)
        middle = len(text) // 2
        # Truncate-and-write in two pieces, not an atomic rename: a reader can catch half a file.
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write(text[:middle])
            handle.flush()
            time.sleep(0)
            handle.write(text[middle:])


class _DirectorySync(_Churn):
    """Refreshes every user's directory record (a heartbeat) from its own connection."""

    def __init__(self, db_path: Path, interval_s: float | None) -> None:
        super().__init__("directory-sync", interval_s)
        self.db_path = db_path
        self.conn: sqlite3.Connection | None = None

    def setup(self) -> None:
        self.conn = _sandbox_connection(self.db_path)

    def change(self) -> None:
        assert self.conn is not None
        with self.conn:
            self.conn.execute("UPDATE users SET synced = synced + 1, status = CASE status WHEN 'active' "
                              "THEN 'away' ELSE 'active' END")

    def teardown(self) -> None:
        if self.conn is not None:
            self.conn.close()


class Sandbox:
    """The 12 tools over real state under `root`, plus the three background threads.

    Interval arguments are seconds between changes; ``None`` makes that thread change only
    when triggered. The user cache keeps the record's 60 s TTL on `clock`, a `ManualClock` the
    harness advances by the time a batch really spans (each candidate is one model call, seconds
    long), so a benchmark need not sleep for a minute to see an entry expire mid-batch. `epoch` is the sandbox's pinned epoch id: one snapshot for the whole run, as
    the record's harness declared; the three mis-declared tools leak change through it anyway.
    """

    def __init__(self, root: str | os.PathLike[str], *, seed: int = 0, write_interval_s: float | None = 0.0005,
                 reload_interval_s: float | None = 0.001, sync_interval_s: float | None = 0.001,
                 cache_ttl_s: float = 60.0, n_orders: int = 200, n_users: int = 60, n_docs: int = 300) -> None:
        self.root = Path(root)
        self.workspace = self.root / "workspace"
        self.db_path = self.root / "sandbox.db"
        self.config_path = self.root / "config.json"
        self.seed = seed
        self.epoch = f"sandbox-{seed}"
        rng = random.Random(seed)
        self.order_ids = [f"ORD-{1000 + i}" for i in range(n_orders)]
        self.skus = [f"SKU-{rng.randrange(10**5, 10**6)}" for _ in range(80)]
        self.handles = [f"user{i:03d}" for i in range(n_users)]
        self.hot_handles = self.handles[:8]  # the users looked up all day
        self.files = self._make_workspace(rng)
        self._make_database(rng, n_docs)
        self.config_path.write_text(json.dumps(CONFIG_BLUE, indent=1), encoding="utf-8")
        self._lock = threading.Lock()  # the tools' connection is shared by whatever threads run tools
        self._conn = sqlite3.connect(self.db_path, check_same_thread=False, timeout=10)
        self.clock = ManualClock()
        self.user_cache = TTLCache(cache_ttl_s, clock=self.clock)
        self.writer = _IndexWriter(self.db_path, write_interval_s, seed)
        self.reloader = _ConfigReloader(self.config_path, reload_interval_s)
        self.directory_sync = _DirectorySync(self.db_path, sync_interval_s)
        self._threads = (self.writer, self.reloader, self.directory_sync)
        self.tools: dict[str, Callable[..., Any]] = {
            "search_index": self.search_index, "read_config": self.read_config, "resolve_user": self.resolve_user,
            "get_order": self.get_order, "lookup_product": self.lookup_product, "read_file": self.read_file,
            "list_directory": self.list_directory, "file_checksum": self.file_checksum,
            "count_lines": self.count_lines, "convert_currency": self.convert_currency,
            "get_current_time": self.get_current_time, "random_sample": self.random_sample,
        }

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Sandbox:
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        for thread in self._threads:
            if thread.is_alive():
                thread.stop()
        self._conn.close()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tick(self, seconds: float) -> None:
        """Time passes on the harness clock, and the rest of the fleet looks up the hot users.

        The user cache is shared with other agents and services, which keep the hot users'
        entries warm; so an entry is reloaded as soon as it expires, and a batch that spans the
        moment sees both versions, as the record's batch did.
        """
        self.clock.advance(seconds)
        for handle in self.hot_handles:
            try:
                self.user_cache.get(handle, self._load_user)
            except LookupError:
                pass

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Each tool as a function-calling definition (name, description, JSON Schema parameters), as a model sees it.

        What a deployer has anyway: types, enums, patterns, bounds, defaults, descriptions. The
        three mis-declared tools claim ``x-deterministic`` too.
        """
        def tool(name: str, description: str, properties: dict[str, Any], required: list[str],
                 deterministic: bool = True) -> dict[str, Any]:
            return {"name": name, "description": description,
                    "parameters": {"type": "object", "properties": properties, "required": required,
                                   "x-deterministic": deterministic}}

        path = {"type": "string", "description": "Workspace-relative file path"}
        currency = {"type": "string", "enum": sorted({c for pair in _CURRENCY_RATES for c in pair})}
        return [
            tool("search_index", "Full-text search over the team's notes and incident write-ups; top hits first.",
                 {"query": {"type": "string", "description": "Search terms, in natural language"},
                  "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}}, ["query"]),
            tool("read_config", "Read one value from the service configuration.",
                 {"key": {"type": "string", "pattern": r"^[a-z_]+(\.[a-z_]+)*$",
                          "description": "Dotted path of the configuration key"}}, ["key"]),
            tool("resolve_user", "The directory record of a user.",
                 {"handle": {"type": "string", "pattern": r"^user\d{3}$", "description": "The user's handle"}},
                 ["handle"]),
            tool("get_order", "Look up an order.",
                 {"order_id": {"type": "string", "pattern": r"^ORD-\d+$", "description": "Order number"},
                  "fields": {"type": "array", "uniqueItems": True,
                             "items": {"type": "string", "enum": ["status", "total", "sku", "customer"]}}},
                 ["order_id"]),
            tool("lookup_product", "A product's name and price.",
                 {"sku": {"type": "string", "pattern": r"^SKU-\d{6}$", "description": "Stock-keeping unit"}}, ["sku"]),
            tool("read_file", "Read a text file of the workspace.", {"path": path}, ["path"]),
            tool("list_directory", "List a folder of the workspace.",
                 {"path": {"type": "string", "description": "Workspace-relative folder", "default": "."}}, []),
            tool("file_checksum", "SHA-256 of a workspace file.", {"path": path}, ["path"]),
            tool("count_lines", "Number of lines of a workspace file.", {"path": path}, ["path"]),
            tool("convert_currency", "Convert an amount of money at today's fixed rate table.",
                 {"amount": {"type": "number", "exclusiveMinimum": 0, "description": "The amount to convert"},
                  "from_currency": currency, "to_currency": currency}, ["amount", "from_currency", "to_currency"]),
            tool("get_current_time", "The current time.",
                 {"timezone": {"type": "string", "default": "UTC", "description": "IANA time zone"}}, [],
                 deterministic=False),
            tool("random_sample", "k items drawn at random.",
                 {"population": {"type": "array"}, "k": {"type": "integer", "minimum": 1}}, ["population"],
                 deterministic=False),
        ]

    def schemas(self) -> list[ToolSchema]:
        """Every tool's schema as declared (from `tool_definitions`): the three mis-declared tools claim determinism too."""
        first_file = self.files[0]
        probe_args: dict[str, dict[str, Any]] = {
            "search_index": {"query": "deploy", "limit": 5}, "read_config": {"key": "db.pool_size"},
            "resolve_user": {"handle": self.handles[0]},
            "get_order": {"order_id": self.order_ids[0], "fields": ["status", "total"]},
            "lookup_product": {"sku": self.skus[0]}, "read_file": {"path": first_file},
            "list_directory": {"path": "docs"}, "file_checksum": {"path": first_file},
            "count_lines": {"path": first_file},
            "convert_currency": {"amount": 10, "from_currency": "EUR", "to_currency": "USD"},
        }
        results = {"list_directory": {"type": "array", "uniqueItems": True}}  # listdir order is the filesystem's
        return [ToolSchema.from_json_schema(d["name"], d["parameters"], result_schema=results.get(d["name"]),
                                            probe_args=probe_args.get(d["name"]), description=d["description"])
                for d in self.tool_definitions()]

    # ------------------------------------------------------------------ setup
    def _make_workspace(self, rng: random.Random) -> list[str]:
        files = []
        for folder, count in (("docs", 12), ("src", 10), ("notes", 8)):
            (self.workspace / folder).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                name = f"{folder}/{rng.choice(_VOCABULARY)}_{i}.{'md' if folder != 'src' else 'py'}"
                lines = [" ".join(rng.choice(_VOCABULARY) for _ in range(8)) for _ in range(rng.randint(3, 40))]
                (self.workspace / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
                files.append(name)
        return files

    def _make_database(self, rng: random.Random, n_docs: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(self.db_path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # readers keep going while the writers commit
            conn.execute("CREATE VIRTUAL TABLE docs USING fts5(title, body)")
            conn.executemany("INSERT INTO docs(title, body) VALUES (?, ?)", [
                (f"doc {i}", " ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(4, 12))))
                for i in range(n_docs)])
            conn.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT, total REAL, sku TEXT, customer TEXT)")
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", [
                (oid, rng.choice(["paid", "shipped", "refunded"]), round(rng.uniform(5, 500), 2),
                 rng.choice(self.skus), rng.choice(self.handles)) for oid in self.order_ids])
            conn.execute("CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT, price REAL)")
            conn.executemany("INSERT INTO products VALUES (?, ?, ?)", [
                (sku, f"{rng.choice(_VOCABULARY)} kit", round(rng.uniform(1, 200), 2)) for sku in self.skus])
            conn.execute("CREATE TABLE users (handle TEXT PRIMARY KEY, name TEXT, status TEXT, synced INTEGER)")
            conn.executemany("INSERT INTO users VALUES (?, ?, ?, 0)", [
                (handle, f"User {handle[4:]}", "active") for handle in self.handles])

    # ------------------------------------------------------------------ the tools
    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def search_index(self, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Top documents for `query` by BM25 rank (declared deterministic; is not under concurrent writes)."""
        terms = [t for t in str(query).split() if t]
        if not terms:
            raise ValueError("empty query")
        match = " ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = self._query("SELECT rowid, title FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?",
                           (match, max(1, min(int(limit), 50))))
        return [{"id": rowid, "title": title} for rowid, title in rows]

    def read_config(self, key: str) -> Any:
        """The value at a dotted `key` of the config file (declared deterministic; races with reloads)."""
        text = self.config_path.read_text(encoding="utf-8")
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RuntimeError(f"config file unreadable (mid-reload?): {exc.msg}") from exc
        for part in str(key).split("."):
            if not isinstance(value, dict) or part not in value:
                raise KeyError(f"no config key {key!r}")
            value = value[part]
        return value

    def resolve_user(self, handle: str) -> dict[str, Any]:
        """The directory record of `handle`, through a TTL cache (declared deterministic; the cache expires)."""
        return dict(self.user_cache.get(str(handle), self._load_user))

    def _load_user(self, handle: str) -> dict[str, Any]:
        rows = self._query("SELECT handle, name, status, synced FROM users WHERE handle = ?", (handle,))
        if not rows:
            raise LookupError(f"no user {handle!r}")
        h, name, status, synced = rows[0]
        return {"handle": h, "name": name, "status": status, "directory_version": synced}

    def get_order(self, order_id: str, fields: list[str] | None = None) -> dict[str, Any]:
        rows = self._query("SELECT id, status, total, sku, customer FROM orders WHERE id = ?", (str(order_id),))
        if not rows:
            raise LookupError(f"no order {order_id!r}")
        record = dict(zip(("id", "status", "total", "sku", "customer"), rows[0], strict=True))
        if fields:
            unknown = sorted(set(fields) - set(record))
            if unknown:
                raise KeyError(f"unknown order fields {unknown}")
            record = {name: record[name] for name in fields}
        return record

    def lookup_product(self, sku: str) -> dict[str, Any]:
        rows = self._query("SELECT sku, name, price FROM products WHERE sku = ?", (str(sku),))
        if not rows:
            raise LookupError(f"no product {sku!r}")
        return dict(zip(("sku", "name", "price"), rows[0], strict=True))

    def _path(self, path: str) -> Path:
        target = (self.workspace / str(path)).resolve()
        if not target.is_relative_to(self.workspace.resolve()):
            raise PermissionError(f"{path!r} is outside the workspace")
        return target

    def read_file(self, path: str) -> str:
        return self._path(path).read_text(encoding="utf-8")

    def list_directory(self, path: str = ".") -> list[str]:
        return os.listdir(self._path(path))  # order is the filesystem's; the schema marks it unordered

    def file_checksum(self, path: str) -> str:
        return hashlib.sha256(self._path(path).read_bytes()).hexdigest()

    def count_lines(self, path: str) -> int:
        return self._path(path).read_text(encoding="utf-8").count("\n")

    def convert_currency(self, amount: float, from_currency: str, to_currency: str) -> float:
        rate = _CURRENCY_RATES.get((str(from_currency).upper(), str(to_currency).upper()))
        if rate is None:
            raise LookupError(f"no rate {from_currency}->{to_currency}")
        return round(float(amount) * rate, 2)

    def get_current_time(self, timezone: str = "UTC") -> str:
        if timezone != "UTC":
            raise LookupError(f"unknown timezone {timezone!r}")
        return dt.datetime.now(dt.UTC).isoformat()

    def random_sample(self, population: list[Any], k: int = 1) -> list[Any]:
        return random.sample(list(population), int(k))
