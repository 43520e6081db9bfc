"""Malformed tool calls a model can emit: wrong types, junk, nesting past the parser's recursion limit."""

from __future__ import annotations

from typing import Any

__all__ = ["malformed_calls", "nested_json"]


def nested_json(depth: int) -> str:
    """A JSON array nested `depth` deep (past Python's recursion limit at 100k)."""
    return "[" * depth + "]" * depth


def malformed_calls(depth: int = 100_000) -> list[tuple[str, Any, Any, Any]]:
    """(case, name, args, call_id): each is something a model or a broken client really sends."""
    circular: dict[str, Any] = {"command": "ls"}
    circular["self"] = circular
    return [
        ("cwd_is_a_number", "bash", {"command": "ls", "cwd": 5}, "c1"),
        ("cwd_is_a_list", "bash", {"command": "ls", "cwd": ["a"]}, "c1"),
        ("command_is_a_number", "bash", {"command": 5}, "c1"),
        ("name_is_none", None, {"path": "a"}, "c1"),
        ("name_is_a_number", 7, {"path": "a"}, "c1"),
        ("call_id_is_a_dict", "lookup", {"q": 1}, {"id": 1}),
        ("keys_not_strings", "lookup", {1: "a", (2, 3): "b"}, "c1"),
        ("args_nested_past_the_recursion_limit", "lookup", '{"q": ' + nested_json(depth) + "}", "c1"),
        ("args_a_bare_object", "lookup", object(), "c1"),
        ("args_circular", "bash", circular, "c1"),
        ("args_json_list", "lookup", "[1, 2]", "c1"),
        ("lone_surrogate", "lookup", {"q": "\ud800"}, "c\udfff"),
    ]
