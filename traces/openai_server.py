"""A scripted chat-completions server on loopback: the OpenAI wire format (and Ollama's) over real HTTP.

    with ScriptedLLMServer(PolicyResponder(policy)) as server:
        model = ChatOpenAI(base_url=server.openai_url, api_key="x", model="scripted", logprobs=True)
        client = OpenAIChatCompletionClient(base_url=server.openai_url, api_key="x", model="scripted", ...)
        chat = ChatOllama(base_url=server.ollama_url, model="scripted", logprobs=True)

The clients users actually run talk to it unchanged: ``POST /v1/chat/completions`` (JSON or a
server-sent-event stream, tool calls and ``logprobs`` in OpenAI's shape, ``usage``),
``GET /v1/models``, and Ollama's ``POST /api/chat`` (JSON or NDJSON stream). What the model says
comes from a responder: `PolicyResponder` runs the testbed's seeded `Policy` on the transcript the
client sent (so a testbed task runs end to end through real client code), `QueueResponder` plays
fixed replies (parallel tool calls, a given logprob profile). Every request body is kept in
``server.requests``. Standard library only; it binds 127.0.0.1 and serves until closed.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from traces.policy import CallResult, Policy, Transcript, tokenize

__all__ = ["PolicyResponder", "QueueResponder", "ScriptedLLMServer", "ScriptedReply", "WireCall",
           "transcript_from_wire"]

MAX_BODY = 8 << 20  # a request larger than this is refused (413): the server is for tests, not for uploads


@dataclass(frozen=True)
class WireCall:
    """One tool call a reply makes."""

    name: str
    args: Mapping[str, Any]
    call_id: str = ""


@dataclass
class ScriptedReply:
    """What the scripted model answers: words, tool calls, and one logprob per token of the words."""

    text: str = ""
    calls: Sequence[WireCall] = ()
    logprobs: Sequence[float] | None = None  # None: -0.05 per token of `text` (a confident model)
    tokens: Sequence[str] | None = None

    def token_logprobs(self) -> list[tuple[str, float]]:
        tokens = list(self.tokens) if self.tokens is not None else tokenize(self.text) or [""]
        values = list(self.logprobs) if self.logprobs is not None else [-0.05] * len(tokens)
        return list(zip(tokens, values, strict=False))


Responder = Callable[[list[dict[str, Any]]], ScriptedReply]


def transcript_from_wire(messages: Sequence[Mapping[str, Any]]) -> Transcript:
    """The policy's view of a chat request's messages (OpenAI's or Ollama's: the roles are the same)."""
    transcript = Transcript(task_text="")
    by_id: dict[str, int] = {}
    unanswered: list[int] = []  # Ollama's tool messages carry no call id: they answer the calls in order
    for message in messages:
        role = message.get("role")
        text = _content_text(message.get("content"))
        if role == "user":
            if not transcript.task_text:
                transcript.task_text = text
            else:
                transcript.hints.append(text)
        elif role == "assistant":
            transcript.turns += 1
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                args = function.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args or "{}")
                    except json.JSONDecodeError:
                        args = {"_raw": args}
                call_id = str(call.get("id") or f"call-{len(transcript.calls)}")
                by_id[call_id] = len(transcript.calls)
                unanswered.append(len(transcript.calls))
                transcript.calls.append(CallResult(call_id, str(function.get("name") or ""),
                                                   args if isinstance(args, dict) else {"_raw": args}, None))
        elif role == "tool":
            position = by_id.get(str(message.get("tool_call_id") or ""))
            if position is None and unanswered:
                position = unanswered[0]
            if position is not None:
                if position in unanswered:
                    unanswered.remove(position)
                made = transcript.calls[position]
                transcript.calls[position] = CallResult(made.call_id, made.tool, made.args, text,
                                                        text.startswith("Error"))
    return transcript


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


class PolicyResponder:
    """Answers with the testbed `Policy`, reading the transcript the client sent (a fresh id per call)."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()

    def __call__(self, messages: list[dict[str, Any]]) -> ScriptedReply:
        reply = self.policy.decide(transcript_from_wire(messages))
        return ScriptedReply(text=reply.text, calls=[WireCall(r.tool, r.args, r.call_id) for r in reply.tool_calls],
                             logprobs=reply.logprobs, tokens=reply.tokens)


class QueueResponder:
    """Plays `replies` in order, then answers "done." (a fixed script for tests)."""

    def __init__(self, replies: Iterable[ScriptedReply]) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]]) -> ScriptedReply:
        with self._lock:
            return self._replies.pop(0) if self._replies else ScriptedReply("done.")


@dataclass
class _Served:
    requests: list[dict[str, Any]] = field(default_factory=list)
    replies: list[ScriptedReply] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedLLMServer:
    """An OpenAI- and Ollama-compatible chat server on 127.0.0.1 answering from a responder (a context manager)."""

    def __init__(self, responder: Responder | None = None, *, model: str = "scripted", latency_s: float = 0.0,
                 port: int = 0) -> None:
        self.responder: Responder = responder or PolicyResponder()
        self.model = model
        self.latency_s = latency_s  # added before every answer (a model's thinking time)
        self._served = _Served()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def openai_url(self) -> str:
        """The base URL OpenAI clients take (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def ollama_url(self) -> str:
        """The host Ollama clients take."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request body received, in order."""
        with self._served.lock:
            return list(self._served.requests)

    @property
    def replies(self) -> list[ScriptedReply]:
        """Every reply sent, in order (what the model said, logprobs included)."""
        with self._served.lock:
            return list(self._served.replies)

    def start(self) -> ScriptedLLMServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-llm-server",
                                            kwargs={"poll_interval": 0.05}, daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ answers
    def answer(self, body: dict[str, Any]) -> ScriptedReply:
        with self._served.lock:
            self._served.requests.append(body)
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        messages = body.get("messages")
        reply = self.responder(list(messages) if isinstance(messages, list) else [])
        with self._served.lock:
            self._served.replies.append(reply)
        return reply


# ---------------------------------------------------------------------- the OpenAI wire format
def _usage(body: Mapping[str, Any], reply: ScriptedReply) -> dict[str, int]:
    prompt = sum(len(tokenize(_content_text(m.get("content")))) for m in body.get("messages") or []
                 if isinstance(m, Mapping))
    completion = len(reply.token_logprobs())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _openai_calls(reply: ScriptedReply) -> list[dict[str, Any]]:
    return [{"id": call.call_id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(dict(call.args))}} for call in reply.calls]


def _openai_logprobs(reply: ScriptedReply) -> dict[str, Any]:
    return {"content": [{"token": token, "logprob": value, "bytes": list(token.encode("utf-8")),
                         "top_logprobs": []} for token, value in reply.token_logprobs()],
            "refusal": None}


def openai_completion(body: Mapping[str, Any], reply: ScriptedReply, model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for `reply`; logprobs only when the request asked for them."""
    calls = _openai_calls(reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or (None if calls else ""),
                               "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
        "model": str(body.get("model") or model), "system_fingerprint": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop",
                     "logprobs": _openai_logprobs(reply) if body.get("logprobs") else None}],
        "usage": _usage(body, reply),
    }


def openai_chunks(body: Mapping[str, Any], reply: ScriptedReply, model: str) -> list[dict[str, Any]]:
    """The same answer as a ``chat.completion.chunk`` stream: words, each tool call, the finish, usage."""
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": str(body.get("model") or model), "system_fingerprint": "scripted"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply.text or ""},
                                    "logprobs": _openai_logprobs(reply) if body.get("logprobs") else None,
                                    "finish_reason": None}]}]
    for index, call in enumerate(_openai_calls(reply)):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, **call}]},
                                            "logprobs": None, "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "tool_calls" if reply.calls else "stop"}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": _usage(body, reply)})
    return chunks


# ---------------------------------------------------------------------- Ollama's wire format
def ollama_chunks(body: Mapping[str, Any], reply: ScriptedReply, model: str) -> list[dict[str, Any]]:
    """``/api/chat`` answers: the message (tool calls with object arguments, logprobs when asked), then done."""
    created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    name = str(body.get("model") or model)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.calls:
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": dict(c.args)}} for c in reply.calls]
    first: dict[str, Any] = {"model": name, "created_at": created, "message": message, "done": False}
    if body.get("logprobs"):
        first["logprobs"] = [{"token": t, "logprob": v, "top_logprobs": []} for t, v in reply.token_logprobs()]
    usage = _usage(body, reply)
    last = {"model": name, "created_at": created, "message": {"role": "assistant", "content": ""}, "done": True,
            "done_reason": "stop", "total_duration": 1000, "load_duration": 0,
            "prompt_eval_count": usage["prompt_tokens"], "prompt_eval_duration": 1,
            "eval_count": usage["completion_tokens"], "eval_duration": 1}
    return [first, last]


def _merge_ollama(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    merged = {**chunks[-1], "message": chunks[0]["message"]}
    if "logprobs" in chunks[0]:
        merged["logprobs"] = chunks[0]["logprobs"]
    return merged


def _handler(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the clients' connection pools expect

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            return  # tests read `server.requests`; stderr stays quiet

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, content_type: str, lines: list[bytes]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Connection", "close")  # the end of the stream is the end of the connection
            self.end_headers()
            for line in lines:
                self.wfile.write(line)
                self.wfile.flush()
            self.close_connection = True

        def _body(self) -> dict[str, Any] | None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"error": {"message": "request too large"}})
                return None
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as exc:
                self._send(400, {"error": {"message": f"invalid JSON: {exc}"}})
                return None
            if not isinstance(body, dict):
                self._send(400, {"error": {"message": "the body must be a JSON object"}})
                return None
            return body

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model",
                                                             "created": 0, "owned_by": "guardrail-testbed"}]})
            elif self.path.rstrip("/") == "/api/version":
                self._send(200, {"version": "0.12.0"})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            route = self.path.split("?", 1)[0].rstrip("/")
            if route not in ("/v1/chat/completions", "/chat/completions", "/api/chat"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = self._body()
            if body is None:
                return
            try:
                reply = server.answer(body)
            except Exception as exc:  # noqa: BLE001 - a responder bug is the client's 500, not a dead server
                self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
                return
            if route == "/api/chat":
                chunks = ollama_chunks(body, reply, server.model)
                if body.get("stream", True):
                    self._stream("application/x-ndjson", [json.dumps(c).encode() + b"\n" for c in chunks])
                else:
                    self._send(200, _merge_ollama(chunks))
            elif body.get("stream"):
                lines = [f"data: {json.dumps(c)}\n\n".encode() for c in openai_chunks(body, reply, server.model)]
                self._stream("text/event-stream", [*lines, b"data: [DONE]\n\n"])
            else:
                self._send(200, openai_completion(body, reply, server.model))

    return Handler
