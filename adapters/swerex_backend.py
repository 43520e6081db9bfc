"""The gate inside a SWE-ReX sandbox: a probe backend that answers through the runtime's command API.

    backend = gate_in_sandbox(guard, runtime)        # every gate layer of `guard` now probes the sandbox

`SwerexBackend` is `guardrail.gate.backend_remote.RemoteBackend` over `SwerexTransport`: each round-trip
is one ``runtime.execute(Command(command=[argv...], shell=False, cwd="/", timeout=...))`` running the
fixed probe program with the sandbox's system interpreter (see `guardrail.gate.remote_probe` and
docs/security.md, "The gate in a sandbox"). Nothing the action names is ever put in a shell line,
and the workspace's interpreter is never run. `runtime_of` finds the runtime behind an environment
or agent (mini-swe-agent's environments, SWE-agent's ``SWEEnv``), which is how `GuardedEnvironment`
and `SweAgentGuardHook` pick the backend by themselves.
"""

from __future__ import annotations

import asyncio
import inspect
import posixpath
import threading
from collections.abc import Iterable
from typing import Any

from guardrail.core.guard import Guard
from guardrail.gate.backend import Roots
from guardrail.gate.backend_remote import RemoteBackend

__all__ = ["SweRexProber", "SwerexBackend", "SwerexTransport", "gate_in_sandbox", "runtime_of"]

_INSTALL = "pip install 'guardrail[swe]'"
_MAX_STDERR = 1 << 20
_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    """One event loop on a daemon thread for every transport: a round-trip never needs a loop of the caller's
    (which may be running already, in an async agent) and never pays for starting one."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="guardrail-swerex-probe", daemon=True).start()
            _LOOP = loop
        return _LOOP


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class SwerexTransport:
    """Runs an argv in a SWE-ReX runtime (``execute``, no shell, from ``/``), bounded by `timeout_s` on both sides:
    the runtime kills the process, and the call is abandoned when the answer is late."""

    def __init__(self, runtime: Any) -> None:
        try:
            from swerex.runtime.abstract import Command
        except ImportError as exc:
            raise ImportError(f"the SWE-ReX probe backend needs swe-rex: {_INSTALL}") from exc
        self.runtime = runtime
        self._command = Command

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        command = self._command(command=list(argv), shell=False, check=False, cwd="/", env=env,
                                timeout=max(0.05, timeout_s * 0.9), merge_output_streams=False)
        try:
            pending = self.runtime.execute(command)
            if inspect.isawaitable(pending):
                future = asyncio.run_coroutine_threadsafe(_awaited(pending), _loop())
                try:
                    response = future.result(timeout=timeout_s)
                except BaseException:
                    future.cancel()
                    raise
            else:
                response = pending
        except Exception:  # noqa: BLE001 - a late, refused or failed round-trip: the questions stay unknown
            return None
        stdout, code = getattr(response, "stdout", None), getattr(response, "exit_code", None)
        if not isinstance(stdout, str):
            return None
        # stderr whole, up to a bound: the find fast path reads every line of it (a cut line would void the run)
        stderr = str(getattr(response, "stderr", "") or "")
        if len(stderr) > _MAX_STDERR:
            stderr = stderr[-_MAX_STDERR:]
        return (code if isinstance(code, int) else -1), stdout, stderr


class SwerexBackend(RemoteBackend):
    """The gate's probes, answered inside the SWE-ReX sandbox `runtime` (a ``RemoteRuntime`` talking to
    ``swerex-remote``, a deployment's ``runtime``). Options as `RemoteBackend` (`python`: the sandbox
    interpreter that runs the probe, an absolute path)."""

    def __init__(self, runtime: Any, **options: Any) -> None:
        options.setdefault("name", "swerex")
        super().__init__(SwerexTransport(runtime), **options)
        self.runtime = runtime


def runtime_of(owner: Any) -> Any | None:
    """The SWE-ReX runtime behind an environment or agent, if there is one: ``.runtime`` (`SwerexRuntimeEnvironment`),
    ``.deployment.runtime`` (mini-swe-agent's SWE-ReX environments, SWE-agent's ``SWEEnv``), or the same one level
    down (``.env``, SWE-agent's ``._env``)."""
    for path in (("runtime",), ("deployment", "runtime"), ("env", "runtime"), ("env", "deployment", "runtime"),
                 ("_env", "deployment", "runtime")):
        found = owner
        for name in path:
            try:
                found = getattr(found, name, None)
            except Exception:  # noqa: BLE001 - e.g. a deployment that is not started raises on .runtime
                found = None
            if found is None:
                break
        if found is not None and callable(getattr(found, "execute", None)):
            return found
    return None


def _gate_layers(guard: Guard) -> Iterable[Any]:
    # A gate with no workspace (the zero-configuration one) checks declared schemas only: nothing to probe.
    return [layer for layer in guard.layers if callable(getattr(layer, "use_backend", None))
            and getattr(layer, "gate", True) is not None]


def gate_in_sandbox(guard: Guard, runtime: Any, *, python: str | None = None, path_env: str | None = None,
                    backend: SwerexBackend | None = None, wait_s: float | None = 30.0) -> SwerexBackend | None:
    """Make every gate layer of `guard` probe the SWE-ReX sandbox `runtime` (its workspace path is the sandbox's);
    `python` and `path_env` name the agent's interpreter and PATH there. Waits up to `wait_s` for the gate to
    learn the interpreter's paths in the sandbox (a few dozen round-trips, once), so the agent's first action is
    not judged while they are still unknown. Returns the backend, or None when the guard has no gate."""
    layers = _gate_layers(guard)
    if not layers:
        return None
    backend = backend or SwerexBackend(runtime)
    for layer in layers:
        layer.use_backend(backend, python=python, path_env=path_env)
    for layer in layers:
        index = getattr(getattr(layer, "gate", None), "index", None)
        if callable(index) and wait_s:
            index(wait_s)
    return backend


class SweRexProber:
    """Single read-only questions about a SWE-ReX sandbox, answered by `SwerexBackend` (the fixed probe program, never
    a shell line, never the workspace's interpreter) and confined like the gate: only paths that really lie under
    `workspace` (or `roots`) are stat'ed or read; anything else, and a probe that fails or times out, answers None
    (unknown), never False."""

    def __init__(self, runtime: Any, *, workspace: str, roots: Iterable[str] = (), timeout_s: float = 5.0,
                 python: str | None = None, max_bytes: int = 1 << 20) -> None:
        self.backend = SwerexBackend(runtime, timeout_s=timeout_s, python=python)
        self.roots = Roots.of([workspace, *roots], resolve=self.backend.realpaths)  # resolved in the sandbox
        self.max_bytes = max_bytes

    def _state(self, path: str, cwd: str | None) -> Any:
        state = self.backend.stat_many([posixpath.join(cwd or "/", path)], self.roots)[0]
        return None if state.kind in ("unknown", "outside") else state

    def exists(self, path: str, *, cwd: str | None = None) -> bool | None:
        state = self._state(path, cwd)
        return None if state is None else state.exists

    def is_file(self, path: str, *, cwd: str | None = None) -> bool | None:
        state = self._state(path, cwd)
        return None if state is None else state.kind == "file"

    def read_text(self, path: str) -> str | None:
        data = self.backend.read_prefix(path, self.roots, self.max_bytes)
        return None if data is None else data[: self.max_bytes].decode("utf-8", errors="replace")

    def sys_path(self, python: str | None = None) -> list[str] | None:
        """The target interpreter's import path, learned by the gate's rules (its trusted base, ``-I -S -B``)."""
        from guardrail.gate.interpreter import TargetPythonError

        try:
            return list(self.backend.import_paths(python, self.roots).sys_path)
        except TargetPythonError:
            return None
