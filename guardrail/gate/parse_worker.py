"""Big modules are parsed in a child process, so a decision's deadline holds and the guard never holds a large AST.

``ast.parse`` is C code that keeps the GIL until it is done: parsing a 200 KB module in the
agent's process stalls every thread for as long as it takes. A module whose parse would not fit
in what is left of the decision's budget goes to this worker instead: the decision waits for the
answer only until its deadline (then the module's predicates are unknown and the report says the
budget ran out), while the worker finishes and keeps the symbol table for the next decision. The
worker is this interpreter run with ``-I -B``; it is handed text, never a path, touches no file,
runs under an address-space limit and is restarted when it dies or overruns its time.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import queue
import resource
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from guardrail.gate.budget import PARSE_COST, python_parse_units

if TYPE_CHECKING:
    from guardrail.gate.index import ModuleSymbols

__all__ = ["ParseWorker", "parse_worker"]

WORKER_MEMORY_BYTES = 768 * 1024 * 1024  # the child's address-space limit (a 1 MB dense module needs ~550 MB)
WORKER_TIMEOUT_S = 15.0  # one parse taking longer than this restarts the worker
_MAX_PENDING = 16
_MAX_RESULTS = 2_000


def dump_symbols(symbols: ModuleSymbols) -> dict[str, Any]:
    """Every field of a symbol table as JSON (`load_symbols` gives back an equal table)."""
    return {
        "names": sorted(symbols.names), "star_imports": [list(s) for s in symbols.star_imports],
        "all_names": None if symbols.all_names is None else list(symbols.all_names), "dynamic": symbols.dynamic,
        "path_assigned": symbols.path_assigned, "import_hooks": symbols.import_hooks,
        "functions": sorted(symbols.functions), "error": symbols.error,
        "classes": {name: {"methods": sorted(c.methods), "inherits": c.inherits, "bases": list(c.bases),
                           "attrs": sorted(c.attrs), "declared": sorted(c.declared), "dynamic": c.dynamic}
                    for name, c in symbols.classes.items()},
        "imports": {name: list(source) for name, source in symbols.imports.items()},
        "imported": [list(i) for i in symbols.imported], "dynamic_imports": symbols.dynamic_imports,
    }


def load_symbols(data: dict[str, Any]) -> ModuleSymbols:
    from guardrail.gate.index import ClassInfo, ModuleSymbols

    return ModuleSymbols(
        names=frozenset(data["names"]), star_imports=tuple((str(m), int(level)) for m, level in data["star_imports"]),
        all_names=None if data["all_names"] is None else tuple(data["all_names"]), dynamic=data["dynamic"],
        path_assigned=bool(data["path_assigned"]), import_hooks=bool(data["import_hooks"]),
        functions=frozenset(data["functions"]), error=data["error"],
        classes={name: ClassInfo(frozenset(c["methods"]), bool(c["inherits"]), tuple(c["bases"]),
                                 attrs=frozenset(c["attrs"]), declared=frozenset(c["declared"]),
                                 dynamic=c["dynamic"])
                 for name, c in data["classes"].items()},
        imports={str(name): (str(m), int(level), str(original)) for name, (m, level, original)
                 in data["imports"].items()},
        imported=tuple((str(m), int(level)) for m, level in data["imported"]),
        dynamic_imports=bool(data["dynamic_imports"]),
    )


class _Request:
    __slots__ = ("id", "key", "sent", "done", "proc")

    def __init__(self, request_id: int, key: Any, proc: subprocess.Popen[str]) -> None:
        self.id, self.key, self.proc = request_id, key, proc
        self.sent = time.monotonic()
        self.done = threading.Event()


class ParseWorker:
    """One child process answering symbol-table requests, in the background, with bounded waits."""

    def __init__(self, *, memory_bytes: int = WORKER_MEMORY_BYTES, timeout_s: float = WORKER_TIMEOUT_S,
                 argv: list[str] | None = None) -> None:
        self.memory_bytes = memory_bytes
        self.timeout_s = timeout_s
        # The child's command line: this interpreter, isolated, serving this module (tests may give another).
        self.argv = argv or [sys.executable, "-I", "-B", "-m", "guardrail.gate.parse_worker", str(memory_bytes)]
        self.peak_rss_bytes = 0
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._outbox: queue.Queue[str | None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[Any, _Request] = {}
        self._results: OrderedDict[Any, ModuleSymbols] = OrderedDict()

    def symbols(self, key: Any, text: str, wait_s: float) -> ModuleSymbols | None:
        """The symbol table of `text` (cached under `key`), or None when it is not ready within `wait_s`."""
        with self._lock:
            done = self._results.get(key)
            if done is not None:
                return done
            self._reap_overdue()
            request = self._pending.get(key)
            if request is None:
                if len(self._pending) >= _MAX_PENDING or not self._ensure_started():
                    return None
                assert self._proc is not None and self._outbox is not None
                request = self._pending[key] = _Request(next(self._ids), key, self._proc)
                self._outbox.put(json.dumps({"id": request.id, "text": text}))
        request.done.wait(max(0.0, wait_s))
        with self._lock:
            return self._results.get(key)

    # ------------------------------------------------------------------ the child
    def _ensure_started(self) -> bool:
        if self._proc is not None and self._proc.poll() is None:
            return True
        try:
            proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                encoding="utf-8", errors="surrogatepass", cwd=os.path.abspath(os.sep), bufsize=1,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"})
        except OSError:
            return False
        outbox: queue.Queue[str | None] = queue.Queue()
        self._proc, self._outbox = proc, outbox
        threading.Thread(target=self._write, args=(proc, outbox), name="guardrail-parse-writer", daemon=True).start()
        threading.Thread(target=self._read, args=(proc,), name="guardrail-parse-reader", daemon=True).start()
        return True

    @staticmethod
    def _write(proc: subprocess.Popen[str], outbox: queue.Queue[str | None]) -> None:
        assert proc.stdin is not None
        while (line := outbox.get()) is not None:
            try:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                return
        try:
            proc.stdin.close()
        except OSError:
            pass

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                reply = json.loads(line)
                request_id, symbols = int(reply["id"]), load_symbols(reply["symbols"])
            except (ValueError, KeyError, TypeError):
                continue
            # What the parse really took on this machine keeps the cost model honest for in-decision parses.
            PARSE_COST.observe(float(reply.get("units", 0)), float(reply.get("seconds", 0.0)))
            with self._lock:
                self.peak_rss_bytes = max(self.peak_rss_bytes, int(reply.get("peak_rss_bytes", 0)))
                for request in [r for r in self._pending.values() if r.id == request_id]:
                    self._finish(request, symbols)
        proc.wait()
        with self._lock:
            # The child is gone. It answers in order, so the oldest request it held is the one it died on:
            # that module is unknown for good; the others are asked again by the next decision that needs them.
            mine = sorted((r for r in self._pending.values() if r.proc is proc), key=lambda r: r.id)
            for index, request in enumerate(mine):
                self._finish(request, _failed(request, proc) if index == 0 else None)
            if self._proc is proc:
                self._proc = None

    def _finish(self, request: _Request, symbols: ModuleSymbols | None) -> None:
        self._pending.pop(request.key, None)
        if symbols is not None:
            self._results[request.key] = symbols
            while len(self._results) > _MAX_RESULTS:
                self._results.popitem(last=False)
        request.done.set()

    def _reap_overdue(self) -> None:
        now = time.monotonic()
        if self._proc is not None and any(now - r.sent > self.timeout_s for r in self._pending.values()):
            self._stop()

    def _stop(self) -> None:
        if self._outbox is not None:
            self._outbox.put(None)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def drain(self, timeout_s: float) -> bool:
        """Wait until every request sent so far is answered (or the worker gave up on it); False on timeout."""
        end = time.monotonic() + timeout_s
        while True:
            with self._lock:
                waiting = [request.done for request in self._pending.values()]
                self._reap_overdue()
            if not waiting:
                return True
            if time.monotonic() > end:
                return False
            waiting[0].wait(min(1.0, max(0.0, end - time.monotonic())))

    def close(self) -> None:
        with self._lock:
            self._stop()


def _failed(request: _Request, proc: subprocess.Popen[str]) -> ModuleSymbols:
    from guardrail.gate.index import ModuleSymbols

    overdue = time.monotonic() - request.sent > WORKER_TIMEOUT_S
    why = "parsing it took too long" if overdue else f"the parser process ended ({proc.returncode})"
    return ModuleSymbols(error=f"not analysable: {why}")


_WORKER: ParseWorker | None = None
_WORKER_LOCK = threading.Lock()


def parse_worker() -> ParseWorker:
    """The process-wide worker (started on the first big module)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = ParseWorker()
            atexit.register(_WORKER.close)
        return _WORKER


def _serve(memory_bytes: int) -> int:
    """The child: one JSON request per line in, one symbol table per line out."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    from guardrail.gate.index import ModuleSymbols, symbols_of_source

    for line in sys.stdin:
        try:
            request = json.loads(line)
            request_id, text = int(request["id"]), str(request["text"])
        except (ValueError, KeyError, TypeError):
            continue
        started = time.perf_counter()
        try:
            symbols = symbols_of_source(text)
        except MemoryError:
            symbols = ModuleSymbols(error="too large to analyse (the parser ran out of memory)")
        seconds = time.perf_counter() - started
        units = python_parse_units(text)
        del text
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        sys.stdout.write(json.dumps({"id": request_id, "symbols": dump_symbols(symbols), "peak_rss_bytes": peak,
                                     "units": units, "seconds": seconds}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1])))
