"""``guardrail mcp-proxy``: a guard between any MCP client and any MCP server, over stdio or streamable HTTP.

    guardrail mcp-proxy --workspace ~/project -- npx @modelcontextprotocol/server-filesystem ~/project
    guardrail mcp-proxy --listen 127.0.0.1:8765 --upstream http://127.0.0.1:9000/mcp

Every message is forwarded as it came (over stdio the very bytes), except ``tools/call``: each one is gated
first (`adapters.mcp_guard.McpSession`), and a blocked call is answered by the proxy itself with a
``CallToolResult`` whose ``isError`` is true and whose text is the guard's message and hint, so the client's
model reads why; it never reaches the server. ``tools/list`` results are read on their way through (the
declared schemas; a tool that changes after the client listed it). One client session is one episode.

The proxy adds no capability: it sends the server only what the client sent, minus blocked calls (and the
cancellations of those). Both sides are outside input: each message is capped in bytes
(`Limits.max_message_bytes`) and nesting (`Limits.max_depth`) and must be JSON-RPC as the SDK's
``JSONRPCMessage`` defines it; a message that is not gets one clear error (a JSON-RPC error to the client
when its id can be read, a line on stderr always) and the session goes on. Nothing of the guard's own
workings (exception texts, internal findings) is sent to either side.
"""

from __future__ import annotations

from adapters.extras import require

require("mcp", __name__)

import asyncio
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import JSONRPCMessage
from pydantic import ValidationError

from adapters.mcp_guard import McpSession
from guardrail.core.guard import Guard

__all__ = ["Bad", "Frame", "Limits", "LineEndpoint", "Relay", "StreamEndpoint", "relay_http", "relay_stdio",
           "serve_http"]

log = logging.getLogger("guardrail.mcp")

_ID_NEAR_START = re.compile(rb'"id"\s*:\s*(-?\d{1,30}|"(?:[^"\\]|\\.){0,200}")')
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """What one message may be: bytes on the wire (one line over stdio), nesting depth, requests in flight."""

    max_message_bytes: int = 16 * 1024 * 1024
    max_depth: int = 64
    max_pending: int = 10_000


@dataclass
class Frame:
    """One JSON-RPC message: its parsed form and, when it came over stdio, its bytes (forwarded as they are)."""

    data: dict[str, Any]
    raw: bytes | None = None


@dataclass
class Bad:
    """A message that could not be used: why, and its id when one could be read from it."""

    why: str
    id: Any = None
    code: int = -32600


class Endpoint(Protocol):
    async def receive(self) -> Frame | Bad | None: ...  # None: the other side closed

    async def send(self, frame: Frame) -> None: ...

    async def aclose(self) -> None: ...  # close the writing end


def _too_deep(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _guess_id(raw: bytes) -> Any:
    found = _ID_NEAR_START.search(raw[:_CHUNK])
    if found is None:
        return None
    try:
        return json.loads(found.group(1))
    except ValueError:
        return None


def parse(raw: bytes, limits: Limits) -> Frame | Bad:
    """One wire message checked: JSON, within the nesting cap, a JSON-RPC message as the SDK defines it."""
    try:
        data = json.loads(raw)
    except RecursionError:
        return Bad(f"a message nested deeper than {limits.max_depth} levels was dropped", _guess_id(raw), -32600)
    except ValueError:
        return Bad("a message that is not JSON was dropped", _guess_id(raw), -32700)
    if not isinstance(data, dict):
        return Bad(f"a JSON {type(data).__name__} is not a JSON-RPC message (batches are not supported): dropped")
    ident = data.get("id") if isinstance(data.get("id"), str | int) and not isinstance(data.get("id"), bool) else None
    if _too_deep(data, limits.max_depth):
        return Bad(f"a message nested deeper than {limits.max_depth} levels was dropped", ident)
    try:
        JSONRPCMessage.model_validate(data)
    except (ValidationError, RecursionError):
        return Bad("a message that is not valid JSON-RPC was dropped", ident)
    return Frame(data, raw)


class LineEndpoint:
    """Newline-delimited JSON-RPC over a byte stream pair (MCP's stdio transport), with the size cap applied
    while reading: an over-long line is skipped to its end, never held whole.

    `read(n)` returns up to n bytes (b"" at the end), `write(data)` sends bytes, `close()` closes the writing end.
    """

    def __init__(self, read: Callable[[int], Awaitable[bytes]], write: Callable[[bytes], Awaitable[Any]],
                 limits: Limits, close: Callable[[], Awaitable[Any]] | None = None) -> None:
        self._read = read
        self._write = write
        self._close = close
        self._limits = limits
        self._buffer = bytearray()
        self._eof = False
        self._lock = anyio.Lock()

    async def _more(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = await self._read(_CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, ValueError):
            chunk = b""
        if not chunk:
            self._eof = True
            return False
        self._buffer.extend(chunk)
        return True

    def _oversized(self, head: bytes) -> Bad:
        return Bad(f"a message over {self._limits.max_message_bytes} bytes was dropped", _guess_id(head))

    async def receive(self) -> Frame | Bad | None:
        cap = self._limits.max_message_bytes
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                if not line.strip():
                    continue
                return self._oversized(line) if len(line) > cap else parse(line, self._limits)
            if len(self._buffer) > cap:
                head = bytes(self._buffer[:_CHUNK])
                self._buffer.clear()
                while await self._more():  # skip the rest of the line without keeping it
                    end = self._buffer.find(b"\n")
                    if end >= 0:
                        del self._buffer[:end + 1]
                        break
                    self._buffer.clear()
                return self._oversized(head)
            if not await self._more():
                if not self._buffer.strip():
                    return None
                line = bytes(self._buffer)
                self._buffer.clear()
                return self._oversized(line) if len(line) > cap else parse(line, self._limits)

    async def send(self, frame: Frame) -> None:
        raw = frame.raw if frame.raw is not None else json.dumps(frame.data, separators=(",", ":")).encode()
        async with self._lock:
            await self._write(raw + b"\n")

    async def aclose(self) -> None:
        try:
            if self._close is not None:
                await self._close()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


class StreamEndpoint:
    """The SDK's own message streams (its streamable-HTTP transports) as an endpoint."""

    def __init__(self, read_stream: Any, write_stream: Any, limits: Limits, *, server_side: bool = False) -> None:
        self._read = read_stream
        self._write = write_stream
        self._limits = limits
        self._server_side = server_side  # it faces the client: messages to it may name the request they belong to
        self.related: Callable[[dict[str, Any]], Any] | None = None

    async def receive(self) -> Frame | Bad | None:
        try:
            item = await self._read.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None
        if isinstance(item, Exception):
            return Bad(f"a message that is not valid JSON-RPC was dropped ({type(item).__name__})")
        data = item.message.model_dump(by_alias=True, mode="json", exclude_none=True)
        if _too_deep(data, self._limits.max_depth):
            ident = data.get("id")
            return Bad(f"a message nested deeper than {self._limits.max_depth} levels was dropped", ident)
        return Frame(data)

    async def send(self, frame: Frame) -> None:
        message = JSONRPCMessage.model_validate(frame.data)
        metadata = None
        if self._server_side and self.related is not None:
            related = self.related(frame.data)
            if related is not None:
                metadata = ServerMessageMetadata(related_request_id=related)
        await self._write.send(SessionMessage(message, metadata=metadata))

    async def aclose(self) -> None:
        await self._write.aclose()


def _params(data: dict[str, Any]) -> dict[str, Any]:
    params = data.get("params")
    return params if isinstance(params, dict) else {}


def _key(ident: Any) -> str:
    return json.dumps(ident)


def _error(ident: Any, code: int, message: str) -> Frame:
    return Frame({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}})


@dataclass
class Relay:
    """Forwards one session's messages both ways and gates its tool calls (`McpSession`)."""

    session: McpSession
    client: Endpoint
    server: Endpoint
    limits: Limits = field(default_factory=Limits)
    pending: dict[str, tuple[str, Any]] = field(default_factory=dict)  # request id -> (method, the id as sent)
    answered: set[str] = field(default_factory=set)  # calls the proxy answered itself (blocked)
    progress: dict[str, Any] = field(default_factory=dict)  # progress token -> the request it belongs to
    errors: list[str] = field(default_factory=list)  # one line per dropped message (also logged)

    def _note(self, side: str, why: str) -> None:
        line = f"guardrail mcp-proxy: {side}: {why}"
        if len(self.errors) < 1000:
            self.errors.append(line)
        log.warning("%s", line)

    def related_request(self, data: dict[str, Any]) -> Any:
        """The client request a server message belongs to (a progress notification, a sampling request)."""
        if "id" in data and "method" not in data:
            return None  # a response finds its request by its own id
        params = _params(data)
        token = params.get("progressToken")
        if token is not None and _key(token) in self.progress:
            return self.progress[_key(token)]
        calls = [ident for method, ident in self.pending.values() if method == "tools/call"]
        return calls[-1] if calls else None

    async def run(self, *, drain_s: float = 5.0) -> None:
        """Relay until the server closes, or the client closes and the server has answered (`drain_s` at most)."""
        try:
            async with anyio.create_task_group() as group:
                async def from_client() -> None:
                    await self.client_to_server()
                    await self.server.aclose()  # the client is done: the server sees its end, answers what is left
                    await anyio.sleep(drain_s)
                    group.cancel_scope.cancel()

                async def from_server() -> None:
                    await self.server_to_client()
                    group.cancel_scope.cancel()  # the server closed: the session is over

                group.start_soon(from_client)
                group.start_soon(from_server)
        finally:
            with anyio.CancelScope(shield=True):
                await self.session.close()

    async def client_to_server(self) -> None:
        while True:
            item = await self.client.receive()
            if item is None:
                return
            if isinstance(item, Bad):
                self._note("client", item.why)
                if item.id is not None:
                    await self.client.send(_error(item.id, item.code, item.why))
                continue
            if await self._from_client(item):
                await self.server.send(item)

    async def _from_client(self, frame: Frame) -> bool:
        """Read one client message; False when the proxy answered it itself (not forwarded)."""
        data = frame.data
        method = data.get("method")
        if not isinstance(method, str):
            return True  # a response to a server's request
        params = _params(data)
        if "id" not in data:
            if method == "notifications/cancelled":
                ident = params.get("requestId")
                if _key(ident) in self.answered:
                    self.answered.discard(_key(ident))
                    return False  # the server never saw that call
                entry = self.pending.pop(_key(ident), None)
                if entry is not None and entry[0] == "tools/call":
                    self.session.forget(_key(ident))
            return True
        key = _key(data["id"])
        if len(self.pending) >= self.limits.max_pending:
            self._note("client", f"more than {self.limits.max_pending} requests in flight: refused")
            await self.client.send(_error(data["id"], -32000, "too many requests in flight"))
            return False
        if method == "tools/call":
            replacement = await self.session.before_call(key, params.get("name"), params.get("arguments"))
            if replacement is not None:
                if len(self.answered) < self.limits.max_pending:
                    self.answered.add(key)
                await self.client.send(Frame({"jsonrpc": "2.0", "id": data["id"], "result": replacement}))
                return False
        if method in ("tools/call", "tools/list"):
            self.pending[key] = (method, data["id"])
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is not None and len(self.progress) < self.limits.max_pending:
            self.progress[_key(token)] = data["id"]
        return True

    async def server_to_client(self) -> None:
        while True:
            item = await self.server.receive()
            if item is None:
                return
            if isinstance(item, Bad):
                self._note("server", item.why)
                entry = self.pending.pop(_key(item.id), None) if item.id is not None else None
                if entry is not None:
                    if entry[0] == "tools/call":
                        await self.session.after_call(_key(item.id), None, error=item.why)
                    await self.client.send(_error(entry[1], -32603, f"the server's answer was unusable: {item.why}"))
                continue
            await self.client.send(await self._from_server(item))

    async def _from_server(self, frame: Frame) -> Frame:
        data = frame.data
        if "method" in data or "id" not in data:
            return frame  # a notification or the server's own request
        key = _key(data["id"])
        entry = self.pending.pop(key, None)
        if entry is None:
            return frame
        result = data.get("result") if isinstance(data.get("result"), dict) else None
        if entry[0] == "tools/list" and result is not None:
            self.session.listed(result)
        elif entry[0] == "tools/call":
            error = data.get("error") if isinstance(data.get("error"), dict) else None
            message = str(error.get("message", "error"))[:2000] if error is not None else None
            replacement = await self.session.after_call(key, result, error=message)
            if replacement is not None:
                return Frame({**data, "result": replacement})
        self.progress = {k: v for k, v in self.progress.items() if _key(v) != key} if self.progress else self.progress
        return frame


# ----------------------------------------------------------------------------- stdio
async def _stdio_pair(limits: Limits) -> LineEndpoint:
    """This process's stdin and stdout as the client's end: the event loop's own pipe transports when they are
    pipes (what an MCP client gives its server: no thread per read or write), else reads and writes in a
    worker thread (a terminal, a file)."""
    loop = asyncio.get_running_loop()
    try:
        reader = asyncio.StreamReader(limit=_CHUNK)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    except (ValueError, OSError):  # not a pipe: a regular file or an unusual descriptor
        stdin, stdout = anyio.wrap_file(sys.stdin.buffer), anyio.wrap_file(sys.stdout.buffer)

        async def write_file(data: bytes) -> None:
            await stdout.write(data)
            await stdout.flush()

        return LineEndpoint(stdin.read1, write_file, limits)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)

    async def write(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return LineEndpoint(reader.read, write, limits)


async def relay_stdio(guard: Guard, command: Sequence[str], *, limits: Limits | None = None,
                      client: LineEndpoint | None = None, meta: dict[str, Any] | None = None,
                      cwd: str | None = None) -> list[str]:
    """Run the server `command` as a subprocess and relay this process's stdin/stdout (or `client`) to it, until
    either side closes; returns the dropped-message lines. The server's stderr is this process's stderr."""
    limits = limits or Limits()
    client = client or await _stdio_pair(limits)
    process = await anyio.open_process(list(command), stdin=-1, stdout=-1, stderr=None)
    assert process.stdin is not None and process.stdout is not None
    server = LineEndpoint(process.stdout.receive, process.stdin.send, limits, close=process.stdin.aclose)
    session = McpSession(guard, meta={"server": list(command)[:16], **(meta or {})}, cwd=cwd)
    relay = Relay(session, client, server, limits)
    try:
        await relay.run()
    finally:
        with anyio.CancelScope(shield=True):
            await server.aclose()
            with anyio.move_on_after(3):
                await process.wait()
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(2):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    return relay.errors


# ----------------------------------------------------------------------------- streamable HTTP
async def relay_http(guard: Guard, read_stream: Any, write_stream: Any, upstream: str, *,
                     limits: Limits | None = None, meta: dict[str, Any] | None = None) -> list[str]:
    """Relay one client session (the SDK server transport's streams) to the streamable-HTTP server `upstream`."""
    from mcp.client.streamable_http import streamable_http_client

    limits = limits or Limits()
    async with streamable_http_client(upstream) as (up_read, up_write, _session_id):
        client = StreamEndpoint(read_stream, write_stream, limits, server_side=True)
        server = StreamEndpoint(up_read, up_write, limits)
        relay = Relay(McpSession(guard, meta={"upstream": upstream, **(meta or {})}), client, server, limits)
        client.related = relay.related_request
        await relay.run()
        return relay.errors


class _RelayApp:
    """What the SDK's session manager runs per client session: the relay to the upstream server."""

    def __init__(self, guard: Guard, upstream: str, limits: Limits) -> None:
        self.guard, self.upstream, self.limits = guard, upstream, limits

    def create_initialization_options(self) -> None:
        return None

    async def run(self, read_stream: Any, write_stream: Any, _options: Any, stateless: bool = False) -> None:
        try:
            await relay_http(self.guard, read_stream, write_stream, self.upstream, limits=self.limits)
        except Exception as exc:  # noqa: BLE001 - one session failing (upstream down) never stops the proxy
            log.warning("guardrail mcp-proxy: a session ended: cannot relay to %s (%s)", self.upstream,
                        type(exc).__name__)


def http_app(guard: Guard, upstream: str, *, limits: Limits | None = None, path: str = "/mcp") -> Any:
    """The ASGI app of the streamable-HTTP proxy (the SDK's session manager in front of `_RelayApp`)."""
    import contextlib

    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Mount

    limits = limits or Limits()
    manager = StreamableHTTPSessionManager(app=_RelayApp(guard, upstream, limits),  # type: ignore[arg-type]
                                           max_request_body_size=limits.max_message_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> Any:
        async with manager.run():
            yield

    return Starlette(routes=[Mount(path, app=manager.handle_request)], lifespan=lifespan)


async def serve_http(guard: Guard, upstream: str, host: str, port: int, *, limits: Limits | None = None,
                     ready: Callable[[int], None] | None = None) -> None:
    """Serve the streamable-HTTP proxy on host:port (loopback unless told otherwise) until cancelled."""
    import uvicorn

    config = uvicorn.Config(http_app(guard, upstream, limits=limits), host=host, port=port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    if ready is not None:
        async def announce() -> None:
            while not server.started:
                await anyio.sleep(0.02)
            sockets = [s for srv in server.servers for s in srv.sockets]
            ready(sockets[0].getsockname()[1] if sockets else port)

        async with anyio.create_task_group() as group:
            group.start_soon(announce)
            await server.serve()
        return
    await server.serve()

