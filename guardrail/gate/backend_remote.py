"""A probe backend for a machine the gate reaches only through a command API: the agent's sandbox.

Every question goes to one fixed program, `guardrail.gate.remote_probe`, run there by the sandbox's
system interpreter as ``PYTHON -I -S -B -c <its source> GR1 <hex request>`` (argv, never a shell
line; the request is data). The interpreter is an absolute path chosen by the operator (default: the
first of ``/usr/bin/python3``, ``/usr/local/bin/python3``, ``/bin/python3`` that answers), and it is
never run when it lies, as written or resolved, under the workspace roots. The target interpreter
of the agent is asked for its own ``sys.path`` by the rules of `guardrail.gate.interpreter` (its
trusted base only, ``-I -S -B``, from ``/``), through the same command API.

One decision costs about one round-trip: the first question of a decision also revalidates what
recent decisions looked at (their stats, the directories whose listings are cached, the files whose
content is cached: listed and read again only where the mtime or size changed), the gate hands over
every path an action names in one `stat_many`, and within the decision every answer is kept. A
round-trip is bounded in time (the decision's deadline, at most `timeout_s`) and in size; one that
fails, times out or answers nonsense leaves its questions *unknown*, never false.

`Transport` is the one thing a sandbox API must provide: run an argv with a timeout and return its
exit code and output (`LocalExecTransport` runs it on this machine; `adapters.swerex_backend` through
SWE-ReX).
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import secrets
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from guardrail.gate import budget, coreutils_probe
from guardrail.gate.backend import (
    DECISION_MEMO,
    ProbeUnavailable,
    Roots,
    _normalize,
    prepare_path,
    taint,
    taints,
    under,
)
from guardrail.gate.budget import BudgetExceeded
from guardrail.gate.fsview import PathState
from guardrail.gate.view import MAX_LISTING

if TYPE_CHECKING:
    from guardrail.gate.interpreter import TargetPython

__all__ = ["DEFAULT_PYTHONS", "PROBE_SOURCE", "LocalExecTransport", "RemoteBackend", "Transport"]

# The probe program, read once from this package: a constant, never formatted with anything.
PROBE_SOURCE = Path(__file__).with_name("remote_probe.py").read_text(encoding="utf-8")
# The same program compiled here, for a sandbox interpreter whose bytecode is this one's (it then skips the
# few milliseconds of compiling it on every round-trip); run by a constant one-line loader.
_PROBE_CODE = marshal.dumps(compile(PROBE_SOURCE, "<guardrail probe>", "exec", optimize=2)).hex()
_LOADER = "import marshal,sys;exec(marshal.loads(bytes.fromhex(sys.argv.pop(1))))"
MAGIC = "GR1"
DEFAULT_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
_FIND_CANDIDATES = ("/usr/bin/find", "/bin/find")
_ARG_CHUNK = 100_000  # hex characters per argv element (Linux caps one at 128 KiB)
_MAX_REQUEST_HEX = 1_500_000  # all argv together stay well under ARG_MAX
_DIR_LINKS_CAP = 4096  # symlinked directories remembered per backend (a bound on what an agent can make us keep)
_FAILED = "sandbox probe failed"
_SANDBOX_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Transport(Protocol):
    """Runs an argv (no shell) on the sandbox from ``/``: (exit code, stdout, stderr), or None when it could not
    run or did not finish within `timeout_s`."""

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None: ...


class LocalExecTransport:
    """Runs the probe on this machine: the reference the sandbox transports are held to, and the control row of
    ``guardrail bench sandbox`` (the probe's cost without the sandbox API's)."""

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        try:
            proc = subprocess.run(argv, cwd=os.sep, env=env, capture_output=True, timeout=max(timeout_s, 0.001),
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.returncode, proc.stdout.decode("ascii", "replace"), proc.stderr.decode("utf-8", "replace")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return bytes.fromhex(value).decode("utf-8", "surrogateescape")


def _blob(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not bytes")
    return bytes.fromhex(value)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("not an integer")
    return value


_KINDS = frozenset({"file", "dir", "other", "missing", "loop", "unknown", "outside"})


_KIND_OF_HEX = {kind.encode().hex(): kind for kind in _KINDS}  # hundreds of answers a decision: no decoding each


def _path_state(value: Any) -> PathState:
    if not isinstance(value, list) or len(value) != 5 or not isinstance(value[3], bool):
        raise ValueError("not a stat answer")
    kind = _KIND_OF_HEX.get(value[0]) if isinstance(value[0], str) else None
    if kind is None:
        raise ValueError(f"unknown kind {_text(value[0])[:20]!r}")
    return PathState(kind, _int(value[1]), _int(value[2]), value[3], "" if value[4] == "" else _text(value[4])[:500])


_NOT_HELD = object()  # `RemoteBackend._held_read`: nothing held for that read
_MARKERS = {-1: "budget", -2: "too big for one answer", -3: "same", -4: "unsupported", -5: "failed", -6: "skipped"}
_HINT_LISTING = 5_000  # a missing path's nearest directory is listed along with it when it holds at most this many
_SOURCE_READ = 256 * 1024  # a Python file stat'ed under the roots comes with its content when at most this big


def _marker(value: Any) -> str | None:
    """What the probe says instead of an answer ("budget", "same", ...), if `value` is such a word (a negative int)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _MARKERS.get(value, "malformed")
    return None


@dataclass
class _Decision:
    """What one gate decision has learned from the sandbox (kept in the decision's memo)."""

    stats: dict[tuple[str, Roots | None], PathState] = field(default_factory=dict)
    listings: dict[tuple[str, Roots | None, int], Any] = field(default_factory=dict)
    reads: dict[tuple[str, Roots | None, int], bytes | None] = field(default_factory=dict)
    realpaths: dict[str, str] = field(default_factory=dict)
    primed: bool = False
    watch: bool = True  # a gate decision (what it looks at is revalidated next time), not a one-off question


@dataclass
class _Content:
    mtime_ns: int
    size: int
    limit: int
    data: bytes

    def serves(self, state: PathState, limit: int) -> bool:
        if state.mtime_ns != self.mtime_ns or state.size != self.size:
            return False
        return len(self.data) <= self.limit or limit <= self.limit  # the whole file, or a long enough prefix


class RemoteBackend:
    """A `ProbeBackend` whose every question runs the fixed probe program through `transport`.

    `python` is the sandbox interpreter that runs the probe (an absolute path; default: the first of
    `DEFAULT_PYTHONS` that answers). The agent's interpreter, when the gate is given none, is the sandbox's
    ``python3`` (then ``python``) on its PATH (`default_python`). `timeout_s` bounds one round-trip
    (and the decision's deadline bounds it further), `max_response_bytes` its answer. `watch` paths,
    `watch_listings` listings and `content_bytes` of file content from recent decisions are revalidated
    with the first question of each decision. `round_trips` counts the round-trips made. With `coreutils` (the
    default) a batch of stats and small listings is answered by one GNU ``find`` run by argv
    (`guardrail.gate.coreutils_probe`: no interpreter started, ~1 ms instead of ~10), the probe program taking
    whatever that cannot settle.
    """

    batches = True

    def __init__(self, transport: Transport, *, python: str | None = None, name: str = "remote",
                 timeout_s: float = 5.0, max_response_bytes: int = 8 << 20, watch: int = 512,
                 watch_listings: int = 128, content_bytes: int = 4 << 20, coreutils: bool = True) -> None:
        if python is not None and not os.path.isabs(python):
            raise ValueError(f"the probe interpreter must be an absolute path in the sandbox, not {python!r}")
        self.transport = transport
        self.key = f"{name}:{secrets.token_hex(6)}"  # a fresh filesystem for every backend: no cache is shared
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.round_trips = 0
        self.fast_round_trips = 0  # of those, the ones answered by find (no interpreter started)
        self.coreutils = coreutils
        self._find: str | None = None
        self._dir_links: set[str] = set()  # paths the sandbox's find showed to be symlinks to directories
        self.failures = 0
        self.last_failure: str | None = None
        self._candidates = (python,) if python else DEFAULT_PYTHONS
        self._python: str | None = None
        self._python_real: str = ""
        self._compiled = False  # the probe interpreter runs this interpreter's bytecode
        self._sandbox_path: str | None = None
        self._discovery_error: str | None = None
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._books = threading.RLock()  # the watched paths, listings and contents below
        self._untrusted: set[str] = set()
        self._memo_key = ("remote-backend", self.key)
        self._watch: OrderedDict[tuple[str, Roots | None], None] = OrderedDict()
        self._watch_cap = watch
        self._listed: OrderedDict[tuple[str, Roots | None, int], int] = OrderedDict()
        self._listed_cap = watch_listings
        self._content: OrderedDict[tuple[str, Roots | None], _Content] = OrderedDict()
        self._content_bytes = 0
        self._content_cap = content_bytes

    # ------------------------------------------------------------------ the probe interpreter
    def _discover(self) -> str | None:
        """The probe interpreter, found once (None with `_discovery_error` set when none answers)."""
        if self._python is not None:
            return self._python
        with self._lock:
            if self._python is not None:
                return self._python
            if time.monotonic() < self._retry_at:
                return None
            errors = []
            for candidate in self._candidates:
                if self._under_untrusted(candidate):
                    errors.append(f"{candidate} lies under the workspace roots: it is never run")
                    continue
                answer = self._send(candidate, (("e",),), (), budget.current(), inherit_env=True)
                if isinstance(answer, str):
                    errors.append(f"{candidate}: {answer}")
                    continue
                try:
                    executable, real, path, _version, magic = answer[0]
                    self._python_real = _text(real)
                    self._sandbox_path = _text(path)
                    self._compiled = _blob(magic) == importlib.util.MAGIC_NUMBER
                    _text(executable)
                except (TypeError, ValueError) as exc:
                    errors.append(f"{candidate}: malformed answer ({exc})")
                    continue
                self._python = candidate
                self._discovery_error = None
                if self.coreutils:
                    self._discover_find()
                return candidate
            self._discovery_error = "no probe interpreter answered in the sandbox (" + "; ".join(errors)[:400] + ")"
            self._retry_at = time.monotonic() + 5.0
            return None

    def _note_untrusted(self, roots: Iterable[str]) -> None:
        """Remember roots the agent can write: the probe interpreter never runs from under any of them."""
        new = [root for root in roots if root not in self._untrusted]
        if new:
            with self._books:
                self._untrusted.update(new)

    def _under_untrusted(self, path: str) -> bool:
        return any(under(path, root) for root in tuple(self._untrusted))

    def _refusal(self, roots: Iterable[Roots]) -> str | None:
        """Why the probe interpreter must not run (it lies, as written or resolved, under a root the agent can
        write), if it must not."""
        for scope in roots:
            self._note_untrusted(scope.untrusted)
        python = self._python or ""
        if self._under_untrusted(python) or (self._python_real and self._under_untrusted(self._python_real)):
            return f"the sandbox interpreter {python} lies under the workspace roots: it is never run"
        return None

    def default_python(self) -> str | None:
        """The agent's interpreter when none is given: python3, then python, on the sandbox's PATH."""
        for name in ("python3", "python"):
            found = self.find_program(name)
            if found is not None:
                return found
        return self._discover()

    def default_path_env(self) -> str:
        """The PATH of the sandbox's command server (what its commands search)."""
        self._discover()
        return self._sandbox_path or _SANDBOX_ENV_PATH

    def find_program(self, name: str) -> str | None:
        directories = [d for d in self.default_path_env().split(os.pathsep) if os.path.isabs(d)]
        try:
            return self.which(name, directories, None)
        except BudgetExceeded:
            return None

    # ------------------------------------------------------------------ one round-trip
    def _send(self, python: str, operations: Sequence[tuple[Any, ...]], table: Sequence[Roots],
              deadline: budget.Deadline | None, *, inherit_env: bool = False) -> list[Any] | str:
        """Run the probe once: its answers (one per operation), or why there are none."""
        timeout = self.timeout_s if deadline is None else min(self.timeout_s, deadline.remaining())
        if timeout <= 0.001:
            return "no time left in the decision"
        request = (round(timeout * 0.7, 4), self.max_response_bytes,
                   [(r.lexical, r.real, r.trusted, r.untrusted, r.pairs) for r in table], list(operations))
        encoded = marshal.dumps(request, 2).hex()
        if len(encoded) > _MAX_REQUEST_HEX:
            return "request too large"
        chunks = [encoded[i:i + _ARG_CHUNK] for i in range(0, len(encoded), _ARG_CHUNK)] or [""]
        program = [_LOADER, _PROBE_CODE] if self._compiled else [PROBE_SOURCE]
        argv = [python, "-I", "-S", "-B", "-c", *program, MAGIC, *chunks]
        self.round_trips += 1
        try:
            outcome = self.transport(argv, timeout_s=timeout,
                                     env=None if inherit_env else {"PATH": _SANDBOX_ENV_PATH, "LC_ALL": "C.UTF-8"})
        except Exception as exc:  # noqa: BLE001 - a transport that raises is a failed round-trip
            outcome, why = None, f"{type(exc).__name__}"
        else:
            why = f"no answer within {timeout:.3f} s"
        if outcome is None:
            return self._failed(why)
        code, stdout, stderr = outcome
        if len(stdout) > self.max_response_bytes * 2 + 1024:
            return self._failed("answer too large")
        line = stdout.strip()
        if code != 0 or not line.startswith(MAGIC + " "):
            return self._failed(f"exit {code}: {(stderr or stdout).strip()[-200:]!r}")
        try:
            answers = json.loads(line[len(MAGIC) + 1:])
        except (ValueError, RecursionError):
            answers = None
        if not isinstance(answers, list) or len(answers) != len(operations):
            return self._failed("malformed answer")
        return answers

    def _send_fast(self, python: str, wire: list[tuple[Any, ...]], roots: list[Roots]) -> list[Any] | str | None:
        """Answer a batch of stats with one ``find`` by argv (`coreutils_probe`), the probe program taking only what
        that leaves unresolved; None when the batch needs the probe program anyway."""
        assert self._find is not None
        found = coreutils_probe.plan(self._find, wire, roots, self._dir_links)
        deadline = budget.current()
        timeout = self.timeout_s if deadline is None else min(self.timeout_s, deadline.remaining())
        if found is None or timeout <= 0.001 or sum(len(a) for a in found.argv) > _MAX_REQUEST_HEX:
            return None
        argv = found.argv
        self.round_trips += 1
        self.fast_round_trips += 1
        try:
            outcome = self.transport(argv, timeout_s=timeout, env={"PATH": _SANDBOX_ENV_PATH, "LC_ALL": "C"})
        except Exception:  # noqa: BLE001 - the probe program answers instead
            outcome = None
        if (outcome is None or outcome[0] not in (0, 1) or len(outcome[1]) > self.max_response_bytes
                or len(outcome[2]) > self.max_response_bytes):
            return None
        records = coreutils_probe.FindRecords(outcome[1], outcome[2], found.starts)
        if not records.valid:
            return None
        for link in records.dir_links:  # the next plan asks where it leads (a set: any thread may add, none removes)
            if len(self._dir_links) < _DIR_LINKS_CAP:
                self._dir_links.add(link)
        answers = coreutils_probe.answer(wire, roots, records)
        left = [index for index, value in enumerate(answers) if value is coreutils_probe.UNRESOLVED]
        merged: list[Any] = [None if value is coreutils_probe.UNRESOLVED else coreutils_probe.wire(value)
                             for value in answers]
        if left:
            rest = self._send(python, [wire[index] for index in left], roots, budget.current())
            if isinstance(rest, str):
                return rest
            for index, value in zip(left, rest, strict=True):
                merged[index] = value
        return merged

    def _discover_find(self) -> None:
        """GNU find in the sandbox, when it answers the way `coreutils_probe` reads it (else every batch goes to the
        probe program)."""
        for candidate in _FIND_CANDIDATES:
            if self._under_untrusted(candidate):
                continue
            try:
                outcome = self.transport([candidate, "-P", "/", "-maxdepth", "0", "-printf", "%y"], timeout_s=2.0,
                                         env={"PATH": _SANDBOX_ENV_PATH, "LC_ALL": "C"})
            except Exception:  # noqa: BLE001 - no find: the probe program answers everything
                outcome = None
            if outcome is not None and outcome[0] == 0 and outcome[1] == "d":
                self._find = candidate
                return

    def _failed(self, why: str) -> str:
        self.failures += 1
        self.last_failure = why
        return why

    def _decision(self) -> _Decision | None:
        memo = DECISION_MEMO.get()
        if memo is None:
            return None
        mine = memo.get(self._memo_key)
        if mine is None:
            mine = memo[self._memo_key] = _Decision()
        return mine  # type: ignore[no-any-return]

    def _ask(self, operations: list[tuple[Any, ...]], decision: _Decision | None) -> list[Any] | str:
        """Answers to `operations` (each ``(name, path, roots, ...)``) in one round-trip, with the decision's
        revalidation added when this is its first."""
        python = self._discover()
        if python is None:
            taint()
            return self._discovery_error or "no probe interpreter"
        asked = len(operations)
        if decision is not None and not decision.primed:
            decision.primed = True
            with self._books:
                operations = operations + self._revalidation(decision, operations)
        table: dict[Roots, int] = {}
        wire = []
        for operation in operations:
            scope = operation[2] if len(operation) > 2 else None
            index = -1 if scope is None else table.setdefault(scope, len(table))
            wire.append((operation[0], operation[1], index, *operation[3:]) if len(operation) > 2 else operation)
        refusal = self._refusal(table)
        if refusal is not None:
            taint()
            return refusal
        answers = self._send_fast(python, wire, list(table)) if self._find else None
        if answers is None:
            answers = self._send(python, wire, list(table), budget.current())
        if isinstance(answers, str):
            taint()  # nothing derived in this decision is cached: the next one asks again
            return answers
        self._keep(operations[asked:], answers[asked:], decision)
        return answers[:asked]

    # ------------------------------------------------------------------ what recent decisions looked at
    def _revalidation(self, decision: _Decision, asked: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        named = {(op[1], op[2]) for op in asked if op[0] == "s"}
        operations: list[tuple[Any, ...]] = [("s", path, scope) for path, scope in reversed(self._watch)
                                             if (path, scope) not in named and (path, scope) not in decision.stats]
        for (path, scope, limit), mtime in self._listed.items():
            if (path, scope) in self._watch:  # a directory still in use: list it again only if it changed
                operations.append(("lc", path, scope, limit, mtime))
        for (path, scope), content in self._content.items():
            if (path, scope) in self._watch and content.size <= 256 * 1024:
                operations.append(("rc", path, scope, content.limit, content.mtime_ns, content.size))
        return operations

    def _keep(self, operations: Sequence[tuple[Any, ...]], answers: Sequence[Any], decision: _Decision | None) -> None:
        """Store the revalidation's answers in the decision (a failed one is simply not stored: asked again)."""
        if decision is None:
            return
        with self._books:
            self._keep_locked(operations, answers, decision)

    def _keep_locked(self, operations: Sequence[tuple[Any, ...]], answers: Sequence[Any], decision: _Decision) -> None:
        for operation, answer in zip(operations, answers, strict=True):
            try:
                if operation[0] == "s":
                    decision.stats[(operation[1], operation[2])] = _path_state(answer)
                elif operation[0] == "lc" and _marker(answer) is None:
                    listing = self._listing(operation[1], answer)
                    decision.listings[(operation[1], operation[2], operation[3])] = listing
                    self._remember_listing(operation[1], operation[2], operation[3], listing)
                elif operation[0] == "rc" and _marker(answer) is None:
                    data = None if answer is None else _blob(answer)
                    decision.reads[(operation[1], operation[2], operation[3])] = data
                    self._remember_content(operation[1], operation[2], operation[3], data, decision)
            except (TypeError, ValueError, BudgetExceeded):
                continue

    def _watched(self, path: str, scope: Roots | None, decision: _Decision | None) -> None:
        if decision is None or not decision.watch:
            return
        key = (path, scope)
        with self._books:
            if key in self._watch:
                self._watch.move_to_end(key)
                return
            self._watch[key] = None
            if len(self._watch) > self._watch_cap:
                self._watch.popitem(last=False)

    def _remember_listing(self, path: str, scope: Roots | None, limit: int, listing: Any) -> None:
        with self._books:
            self._remember_listing_locked((path, scope, limit), listing)

    def _remember_listing_locked(self, key: tuple[str, Roots | None, int], listing: Any) -> None:
        if listing is None:
            self._listed.pop(key, None)
            return
        self._listed[key] = listing[0]
        self._listed.move_to_end(key)
        if len(self._listed) > self._listed_cap:
            self._listed.popitem(last=False)

    def _remember_content(self, path: str, scope: Roots | None, limit: int, data: bytes | None,
                          decision: _Decision | None) -> None:
        with self._books:
            self._remember_content_locked((path, scope), limit, data, decision)

    def _remember_content_locked(self, key: tuple[str, Roots | None], limit: int, data: bytes | None,
                                 decision: _Decision | None) -> None:
        old = self._content.pop(key, None)
        if old is not None:
            self._content_bytes -= len(old.data)
        state = decision.stats.get(key) if decision is not None else None
        if data is None or state is None or state.kind != "file" or len(data) > self._content_cap // 4:
            return
        self._content[key] = _Content(state.mtime_ns, state.size, limit, data)
        self._content_bytes += len(data)
        while self._content_bytes > self._content_cap and self._content:
            _, dropped = self._content.popitem(last=False)
            self._content_bytes -= len(dropped.data)

    # ------------------------------------------------------------------ the ProbeBackend questions
    _prepared = staticmethod(prepare_path)

    def _unanswered(self, paths: Sequence[str], within: Roots | None, decision: _Decision | None,
                    operation: Callable[[str], tuple[Any, ...]]
                    ) -> tuple[list[PathState | None], list[tuple[Any, ...]], list[int]]:
        """What can be said of `paths` without a round-trip (answered in place), and the operations, one per path
        left, with the positions they answer."""
        results: list[PathState | None] = [None] * len(paths)
        operations: list[tuple[Any, ...]] = []
        where: list[int] = []
        for position, raw in enumerate(paths):
            prepared = self._prepared(raw, within)
            if isinstance(prepared, PathState):
                results[position] = prepared
                continue
            self._watched(prepared, within, decision)
            known = decision.stats.get((prepared, within)) if decision is not None else None
            if known is not None:
                results[position] = known
                continue
            operations.append(operation(prepared))
            where.append(position)
        return results, operations, where

    def stat_many(self, paths: Sequence[str], within: Roots | None) -> list[PathState]:
        decision = self._decision()
        results, operations, where = self._unanswered(paths, within, decision,
                                                      lambda path: self._stat_operation(path, within))
        if operations:
            answers = self._ask(operations, decision)
            for index, (position, operation) in enumerate(zip(where, operations, strict=True)):
                answer = answers if isinstance(answers, str) else answers[index]
                content = None
                if operation[0] == "sr" and isinstance(answer, list) and len(answer) == 2:
                    answer, content = answer
                state = self._state_of(answer)
                if decision is not None:
                    decision.stats[(operation[1], within)] = state
                    if content is not None and _marker(content) is None:
                        try:
                            self._remember_content(operation[1], within, _SOURCE_READ, _blob(content), decision)
                        except ValueError:
                            pass
                results[position] = state
        return [state if state is not None else PathState("unknown") for state in results]

    def _stat_operation(self, path: str, within: Roots | None) -> tuple[Any, ...]:
        """A stat; for a Python file under the roots (a module the index may parse next), with its content when
        small and not held already: one round-trip where a stat and a read would take two."""
        if within is None or not path.endswith(".py"):
            return ("s", path, within)
        with self._books:
            held = self._content.get((path, within))
        mtime, size = (held.mtime_ns, held.size) if held is not None and len(held.data) <= held.limit else (-1, -1)
        return ("sr", path, within, _SOURCE_READ, mtime, size)

    def prefetch(self, paths: Sequence[str], within: Roots | None, commands: Sequence[str] = ()) -> list[PathState]:
        """`stat_many(paths, within)` and, in the same round-trip, the plain stats `which` asks of `commands` (the
        action's command names in each PATH directory), and for a path that is not there what its hint looks
        at next (its ancestors up to the nearest directory and that directory's listing, when small)."""
        decision = self._decision()
        if decision is None:
            return self.stat_many(paths, within)
        results, operations, where = self._unanswered(
            paths, within, decision, lambda path: ("sx", path, within, MAX_LISTING, _HINT_LISTING))
        for raw in commands:
            prepared = self._prepared(raw, None)
            if isinstance(prepared, str) and (prepared, None) not in decision.stats:
                self._watched(prepared, None, decision)
                operations.append(("s", prepared, None))
        answers = self._ask(operations, decision) if operations else []
        for index, operation in enumerate(operations):
            answer = answers if isinstance(answers, str) else answers[index]
            if operation[0] == "s":
                decision.stats[(operation[1], None)] = self._state_of(answer)
                continue
            results[where[index]] = decision.stats[(operation[1], within)] = self._context(operation, answer, decision)
        return [state if state is not None else PathState("unknown") for state in results]

    def _context(self, operation: tuple[Any, ...], answer: Any, decision: _Decision) -> PathState:
        """Keep an "sx" answer's ancestors and listing in the decision; the path's own state."""
        if isinstance(answer, str) or not isinstance(answer, list) or len(answer) != 3:
            return self._state_of(answer)
        state = self._state_of(answer[0])
        scope, limit = operation[2], operation[3]
        try:
            for ancestor, found in answer[1] if isinstance(answer[1], list) else ():
                decision.stats.setdefault((_text(ancestor), scope), _path_state(found))
            if _marker(answer[2]) is None and isinstance(answer[1], list) and answer[1]:
                directory = _text(answer[1][-1][0])
                listing = self._listing(directory, answer[2])
                decision.listings[(directory, scope, limit)] = listing
                self._remember_listing(directory, scope, limit, listing)
        except (TypeError, ValueError, BudgetExceeded):
            pass  # the hint asks again
        return state

    @staticmethod
    def _state_of(answer: Any) -> PathState:
        if isinstance(answer, str):
            return PathState("unknown", error=f"{_FAILED}: {answer}")
        taint_it = True
        if _marker(answer) == "budget":
            state = PathState("unknown", error=f"{_FAILED}: out of time")
        else:
            try:
                state, taint_it = _path_state(answer), False
            except (TypeError, ValueError) as exc:
                state = PathState("unknown", error=f"{_FAILED}: malformed answer ({exc})")
        if taint_it:
            taint()
        return state

    @staticmethod
    def _listing(path: str, answer: Any) -> tuple[int, frozenset[str]] | None:
        marker = _marker(answer)
        if marker is not None or (answer is not None and not (
                isinstance(answer, list) and len(answer) == 2 and isinstance(answer[1], list))):
            taint()
            if marker == "budget":
                raise BudgetExceeded(f"listing {path}")
            raise ProbeUnavailable(f"{_FAILED} listing {path}: {marker or 'malformed answer'}")
        if answer is None:
            return None
        return _int(answer[0]), frozenset(_text(name) for name in answer[1])

    def list_dir(self, path: str, within: Roots | None, limit: int) -> tuple[int, frozenset[str]] | None:
        prepared = self._prepared(path, within)
        if isinstance(prepared, PathState):
            return None
        decision = self._decision()
        key = (prepared, within, limit)
        if decision is not None and key in decision.listings:
            return decision.listings[key]  # type: ignore[no-any-return]
        answers = self._ask([("l", prepared, within, limit)], decision)
        if isinstance(answers, str):
            raise ProbeUnavailable(f"{_FAILED} listing {prepared}: {answers}")
        try:
            listing = self._listing(prepared, answers[0])
        except (TypeError, ValueError) as exc:
            raise ProbeUnavailable(f"{_FAILED} listing {prepared}: malformed answer") from exc
        if decision is not None:
            decision.listings[key] = listing
        self._remember_listing(prepared, within, limit, listing)
        return listing

    def _held_read(self, prepared: str, within: Roots | None, limit: int, decision: _Decision | None) -> Any:
        """What this decision already read of the file, or the content held from an earlier one while the file's
        stat in this decision still matches it; `_NOT_HELD` otherwise."""
        if decision is None:
            return _NOT_HELD
        key = (prepared, within, limit)
        if key in decision.reads:
            return decision.reads[key]
        state = decision.stats.get((prepared, within))
        with self._books:
            held = self._content.get((prepared, within))
            if state is not None and state.kind == "file" and held is not None and held.serves(state, limit):
                self._content.move_to_end((prepared, within))
                return held.data[:limit + 1]
        return _NOT_HELD

    def _keep_read(self, prepared: str, within: Roots | None, limit: int, answer: Any,
                   decision: _Decision | None) -> bytes | None:
        """A read's answer as bytes (None: not a regular file), kept in the decision and the content cache; raises
        ValueError for a marker or a malformed answer (nothing is kept)."""
        if _marker(answer) is not None:
            raise ValueError("no content")
        data = None if answer is None else _blob(answer)
        if decision is not None:
            decision.reads[(prepared, within, limit)] = data
        self._remember_content(prepared, within, limit, data, decision)
        return data

    def read_prefix(self, path: str, within: Roots | None, limit: int) -> bytes | None:
        prepared = self._prepared(path, within)
        if isinstance(prepared, PathState):
            return None
        decision = self._decision()
        held = self._held_read(prepared, within, limit, decision)
        if held is not _NOT_HELD:
            return held  # type: ignore[no-any-return]
        answers = self._ask([("r", prepared, within, limit)], decision)
        try:
            if isinstance(answers, str):
                raise ValueError(answers)
            return self._keep_read(prepared, within, limit, answers[0], decision)
        except (TypeError, ValueError):
            taint()
            return None  # unreadable is unknown: whatever depends on the text is not decided, nor cached

    def read_many(self, paths: Sequence[str], within: Roots | None, limit: int) -> None:
        """Read ahead, in one round-trip, what `read_prefix(path, within, limit)` will be asked of each of `paths` in
        this decision (outside a decision, nothing: there is nowhere to keep the answers)."""
        decision = self._decision()
        if decision is None:
            return
        prepared_paths = [self._prepared(raw, within) for raw in paths]
        wanted = [prepared for prepared in prepared_paths
                  if isinstance(prepared, str) and self._held_read(prepared, within, limit, decision) is _NOT_HELD]
        if not wanted:
            return
        answers = self._ask([("r", prepared, within, limit) for prepared in wanted], decision)
        if isinstance(answers, str):
            return  # each read_prefix asks again, and says what it gets
        for prepared, answer in zip(wanted, answers, strict=True):
            try:
                self._keep_read(prepared, within, limit, answer, decision)
            except (TypeError, ValueError):
                continue  # read_prefix asks again

    def which(self, program: str, directories: Sequence[str], within: Roots | None) -> str | None:
        if not program or "/" in program or "\x00" in program:
            return None
        candidates = [os.path.join(directory, program) for directory in directories]
        for candidate, state in zip(candidates, self.stat_many(candidates, within), strict=True):
            if state.kind == "file" and state.executable:
                return candidate
            if state.kind == "unknown" and state.error.startswith(_FAILED):
                raise ProbeUnavailable(f"looking up {program}: {state.error}")
        return None

    def walk(self, root: str, within: Roots | None, limit: int, skip: frozenset[str]) -> list[str]:
        root = _normalize(root)
        deadline = budget.current()
        # Half of what is left of the decision at most, as LocalBackend: the hint built from the walk needs the rest.
        allowance = deadline.remaining() / 2 if deadline is not None else self.timeout_s
        answers = self._ask([("w", root, within, limit, tuple(sorted(skip)), round(max(allowance, 0.0), 4))],
                            self._decision())
        if isinstance(answers, str) or not isinstance(answers[0], list):
            raise ProbeUnavailable(f"{_FAILED} listing the files under {root}")
        try:
            return [_text(name) for name in answers[0]]
        except ValueError as exc:
            raise ProbeUnavailable(f"{_FAILED} listing the files under {root}: malformed answer") from exc

    # ------------------------------------------------------------------ what the target interpreter needs
    def realpaths(self, paths: Sequence[str], *, trusted: bool = True) -> list[str | None]:
        """Each path with symlinks resolved in the sandbox (None where the probe did not answer); `trusted=False`
        says the agent can write them (the workspace roots), before anything runs."""
        if not trusted:
            self._note_untrusted(paths)
        if not paths:
            return []
        decision = self._decision()
        answers = self._ask([("p", path) for path in paths], decision)
        if isinstance(answers, str):
            return [None] * len(paths)
        resolved: list[str | None] = []
        for answer in answers:
            try:
                resolved.append(_text(answer))
            except ValueError:
                resolved.append(None)
        return resolved

    def realpath(self, path: str) -> str:
        decision = self._decision()
        if decision is not None and path in decision.realpaths:
            return decision.realpaths[path]
        (found,) = self.realpaths([path])
        if found is None:
            raise OSError(f"{_FAILED}: cannot resolve {path}")
        if decision is not None:
            decision.realpaths[path] = found
        return found

    def run_python(self, argv: list[str], timeout_s: float) -> tuple[int, str, str] | None:
        """Run a trusted interpreter of the sandbox (the target's base, chosen by `guardrail.gate.interpreter`)
        with a fixed query, from ``/``; None when it could not run."""
        env = {"PATH": self.default_path_env(), "LC_ALL": "C.UTF-8"}
        self.round_trips += 1
        try:
            outcome = self.transport(argv, timeout_s=min(timeout_s, self.timeout_s * 2), env=env)
        except Exception:  # noqa: BLE001 - the target's paths are then unknown, with a finding
            return None
        if outcome is not None and len(outcome[1]) > self.max_response_bytes:
            return 1, "", "answer too large"
        return outcome

    def import_paths(self, python: str | None, untrusted: Roots) -> TargetPython:
        """The target's paths by the rules of `guardrail.gate.interpreter`, every path resolved in the sandbox. Asked
        again (up to three times) when a round-trip failed on the way, so one hiccup of the sandbox does not leave
        the gate without an index."""
        from guardrail.gate.interpreter import TargetPythonError, target_python

        self._note_untrusted(untrusted.lexical + untrusted.real)
        for attempt in range(3):
            # One memo for the whole question (each path resolved and stat'ed once), without a decision's revalidation.
            token = DECISION_MEMO.set({self._memo_key: _Decision(primed=True, watch=False)})
            try:
                target = target_python(python, untrusted=untrusted, backend=self)
                failed = taints() > 0
            except TargetPythonError:
                if not taints() or attempt == 2:
                    raise
                failed = True
            finally:
                DECISION_MEMO.reset(token)
            if not failed or attempt == 2:
                return target
            time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

