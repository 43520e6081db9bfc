"""`guardrail mcp-proxy`: put the guard in front of any MCP server (stdio, or streamable HTTP with --listen)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from guardrail.app.assemble import Guard
from guardrail.core.cliutil import Command

__all__ = ["MCP_PROXY", "build_guard", "server_roots"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", action="append", metavar="DIR",
                        help="a directory the server works in (repeatable; default: the directories a filesystem "
                             "server is given, a git server's --repository)")
    parser.add_argument("--mode", choices=["report", "intervene"], default=None,
                        help="intervene (the default without --config) blocks a call whose preconditions are false; "
                             "report only records")
    parser.add_argument("--config", metavar="guardrail.toml",
                        help="a deployment file (Guard.from_config); the flags given here win over it")
    parser.add_argument("--model", help="a fitted step monitor's model file (the monitor runs on each call)")
    parser.add_argument("--spec", help="a verifier spec (a shipped name or a spec file)")
    parser.add_argument("--record", metavar="STORE",
                        help="record every session as an episode: a directory, sqlite:///runs.db or postgresql://...")
    parser.add_argument("--fail-closed", action="store_true", help="block a call the guard itself failed to check")
    parser.add_argument("--listen", metavar="HOST:PORT", help="serve streamable HTTP here (with --upstream)")
    parser.add_argument("--upstream", metavar="URL", help="the streamable-HTTP MCP server to relay to")
    parser.add_argument("--max-message-bytes", type=int, default=16 * 1024 * 1024,
                        help="the largest message either side may send (default 16 MiB)")
    parser.add_argument("--max-depth", type=int, default=64, help="the deepest JSON nesting a message may have")
    parser.add_argument("server", nargs="*", help="the stdio server's command line (after --)")


def server_roots(command: Sequence[str]) -> list[str]:
    """The directories a reference server is confined to, read off its command line: the filesystem server's
    directory arguments, the git server's ``--repository``. Empty for any other server."""
    words = list(command)
    for index, word in enumerate(words):
        if "server-filesystem" in word or word.endswith("mcp-server-filesystem"):
            return [os.path.abspath(w) for w in words[index + 1:] if not w.startswith("-") and os.path.isdir(w)]
        if word in ("--repository", "-r") and index + 1 < len(words):
            return [os.path.abspath(words[index + 1])]
        if word.startswith("--repository="):
            return [os.path.abspath(word.split("=", 1)[1])]
    return []


def _layer_options(args: argparse.Namespace, roots: Sequence[str]) -> dict[str, Any]:
    """The Guard.default options the flags give (only those given, so a deployment file keeps the rest)."""
    options: dict[str, Any] = {}
    for flag, key in (("mode", "mode"), ("model", "model"), ("spec", "spec"), ("record", "record")):
        if getattr(args, flag):
            options[key] = getattr(args, flag)
    if args.fail_closed:
        options["fail_closed"] = True
    if len(roots) > 1:  # the server's other directories are workspace roots too
        from guardrail.gate.layer import GateLayer

        options["disable"] = ("gate",)
        options["extra_layers"] = [GateLayer(roots[0], roots=roots[1:])]
    elif roots:
        options["workspace"] = roots[0]
    return options


def build_guard(args: argparse.Namespace, roots: Sequence[str]) -> Any:
    """The Guard the proxy runs: a deployment file's (``--config``, through Guard.from_config) with the flags given
    on top, else the flags' own (intervene by default). The server's directories are the workspace unless the
    file or ``--workspace`` names one."""
    if args.config:
        from guardrail.app.config import ConfigError, guard_options, load_config

        try:
            named = guard_options(load_config(args.config)).get("workspace") is not None
        except ConfigError as exc:
            raise SystemExit(f"guardrail mcp-proxy: {exc}") from None
        options = _layer_options(args, roots if (args.workspace or not named) else [])
        try:
            return Guard.from_config(args.config, **options)
        except ConfigError as exc:
            raise SystemExit(f"guardrail mcp-proxy: {exc}") from None
    options = _layer_options(args, roots)
    options.setdefault("mode", "intervene")
    return Guard.default(**options)


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"guardrail mcp-proxy: --listen takes HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    try:
        from adapters.mcp_proxy import Limits, relay_stdio, serve_http
    except ImportError as exc:
        sys.stderr.write(f"guardrail mcp-proxy: {exc}\n")
        return 2
    import anyio

    if bool(args.listen) != bool(args.upstream):
        sys.stderr.write("guardrail mcp-proxy: --listen and --upstream go together (streamable HTTP)\n")
        return 2
    if not args.listen and not args.server:
        sys.stderr.write("guardrail mcp-proxy: give the server's command after --, or --listen with --upstream\n")
        return 2
    if args.max_message_bytes < 1024 or args.max_depth < 4:
        sys.stderr.write("guardrail mcp-proxy: --max-message-bytes must be >= 1024 and --max-depth >= 4\n")
        return 2
    roots = [os.path.abspath(w) for w in args.workspace or []] or server_roots(args.server)
    missing = [r for r in roots if not os.path.isdir(r)]
    if missing:
        sys.stderr.write(f"guardrail mcp-proxy: workspace {missing[0]} is not a directory\n")
        return 2
    guard = build_guard(args, roots)
    limits = Limits(max_message_bytes=args.max_message_bytes, max_depth=args.max_depth)
    try:
        if args.listen:
            host, port = _host_port(args.listen)
            if host not in _LOOPBACK:
                sys.stderr.write(f"guardrail mcp-proxy: listening on {host}, not loopback: anyone who can reach "
                                 "it can call the upstream server's tools through it\n")
            anyio.run(partial(serve_http, guard, args.upstream, host, port, limits=limits))
        else:
            anyio.run(partial(relay_stdio, guard, args.server, limits=limits))
    except OSError as exc:
        sys.stderr.write(f"guardrail mcp-proxy: cannot start: {exc}\n")
        return 1
    finally:
        guard.flush()
        guard.close()
    return 0


MCP_PROXY = Command(help="guard every tool call between an MCP client and an MCP server (stdio or streamable HTTP)",
                    add_arguments=_add_arguments, run=_run)
