"""The shell grammar the gate reads commands with: tree-sitter-bash, plus the word expansions bash does before a command runs.

tree-sitter-bash is a maintained, complete bash grammar in C: a typical agent command parses in tens of
microseconds, a 100 KB one in milliseconds, and the parse is cancelled when the decision's deadline
passes (`parse`). What the grammar leaves to the shell at run time is done here on the parsed pieces:
brace expansion (``data/{a,b}.txt``, ``x{1..3}``), glob detection (an unquoted ``*``, ``?`` or ``[``) and
quote removal. Nothing here runs anything.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import tree_sitter
import tree_sitter_bash

from guardrail.gate import budget
from guardrail.gate.budget import BudgetExceeded

__all__ = ["MAX_BRACE_WORDS", "QUOTE", "Node", "brace_expand", "has_glob", "parse", "unmark"]

Node = tree_sitter.Node
MAX_BRACE_WORDS = 256  # a brace expression making more words than this is left unexpanded (dynamic)
QUOTE = "\x01"  # marks the next character as quoted: no brace, glob or tilde meaning
_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_SEQUENCE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$|^([A-Za-z])\.\.([A-Za-z])$")


_CHEAP_BYTES = 4_000  # a shorter line parses in about a millisecond at worst: no deadline check needed
# The grammar reads only ASCII bytes: every byte of a non-ASCII character is handed to it as an ASCII letter (52
# of them, so different characters mostly stay different). tree-sitter-bash 0.25.1 crashes the process
# (SIGSEGV, about one parse in a few thousand) on ``{`` followed by a code point from U+A0000 up, found by
# `make fuzz`; bash itself treats every non-ASCII byte as an ordinary word character, which a letter is too. The
# tree's byte offsets are unchanged (one byte for one byte), so every node still slices the real line.
_ASCII_ONLY = bytes(range(128)) + bytes(
    (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" * 3)[:128])


def parse(source: bytes) -> Node:
    """The syntax tree of `source` (the line as bytes, read by the grammar as ASCII: see `_ASCII_ONLY`); raises
    `BudgetExceeded` when the decision's deadline passes mid-parse (tree-sitter asks a progress callback every
    few hundred bytes, so even a pathological line costs at most the deadline)."""
    source = source.translate(_ASCII_ONLY)
    parser = tree_sitter.Parser(_LANGUAGE)
    deadline = budget.current()
    if deadline is None or len(source) <= _CHEAP_BYTES:
        return parser.parse(source).root_node
    stop = deadline.end

    def read(offset: int, _point: object) -> bytes:
        return source[offset:offset + 65_536]

    def progress(*_state: object) -> bool:  # True cancels the parse
        return time.perf_counter() > stop

    try:
        tree = parser.parse(read, progress_callback=progress)
    except ValueError:  # "Parsing failed": cancelled by the callback
        tree = None
    if tree is None:
        raise BudgetExceeded("parsing the command line")
    return tree.root_node


def walk_named(node: Node) -> Iterator[Node]:
    """The named children of `node`, in order."""
    return (child for child in node.children if child.is_named)


# --------------------------------------------------------------------------------------------- brace expansion
def _unquoted(word: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """The unquoted characters of a marked word from `start`, with their offsets (a `QUOTE` hides the next one)."""
    i = start
    while i < len(word):
        ch = word[i]
        if ch == QUOTE:
            i += 2
            continue
        yield i, ch
        i += 1


def _closing(word: str, start: int) -> int | None:
    """The offset of the unquoted ``}`` closing the ``{`` at `start`, or None when it is never closed."""
    depth = 0
    for i, ch in _unquoted(word, start):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _split_top(body: str) -> list[str] | None:
    """The comma-separated alternatives of a brace body at nesting level 0 (None: fewer than two)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in _unquoted(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts if len(parts) > 1 else None


def _sequence(body: str) -> list[str] | None:
    match = _SEQUENCE.match(body)
    if match is None:
        return None
    if match.group(4):
        first, last = ord(match.group(4)), ord(match.group(5))
        step = 1 if last >= first else -1
        return [chr(c) for c in range(first, last + step, step)]
    first, last = int(match.group(1)), int(match.group(2))
    step = abs(int(match.group(3) or 1)) or 1
    if abs(last - first) // step > MAX_BRACE_WORDS:
        return None
    width = max(len(match.group(1)), len(match.group(2))) if match.group(1).lstrip("-").startswith("0") or \
        match.group(2).lstrip("-").startswith("0") else 0
    values = range(first, last + 1, step) if last >= first else range(first, last - 1, -step)
    return [str(v).zfill(width) if width else str(v) for v in values]


def brace_expand(word: str) -> list[str] | None:
    """Bash's brace expansion of a marked word (quoted characters behind `QUOTE`), or None when it makes more than
    `MAX_BRACE_WORDS` words. A word without an unquoted ``{...,...}`` or ``{a..b}`` is returned as it is."""
    for i, ch in _unquoted(word):
        if ch != "{" or (i and word[i - 1] == "$"):
            continue
        j = _closing(word, i)
        if j is None:
            return [word]
        body = word[i + 1:j]
        alternatives = _split_top(body) or _sequence(body)
        if alternatives is None:
            continue
        prefix, suffix = word[:i], word[j + 1:]
        out: list[str] = []
        for alternative in alternatives:
            expanded = brace_expand(prefix + alternative + suffix)
            if expanded is None:
                return None
            out.extend(expanded)
            if len(out) > MAX_BRACE_WORDS:
                return None
        return out
    return [word]


def has_glob(word: str) -> bool:
    """Whether a marked word has an unquoted glob character (bash would match it against file names)."""
    return any(ch in "*?" or (ch == "[" and "]" in word[i + 1:]) for i, ch in _unquoted(word))


def unmark(word: str) -> str:
    """The word with its quote marks removed."""
    return word.replace(QUOTE, "") if QUOTE in word else word


def glob_pattern(word: str) -> str:
    """A marked word as an `fnmatch` pattern: quoted characters escaped, unquoted ones kept."""
    out: list[str] = []
    i = 0
    while i < len(word):
        if word[i] == QUOTE and i + 1 < len(word):
            ch = word[i + 1]
            out.append(f"[{ch}]" if ch in "*?[" else ch)
            i += 2
            continue
        out.append(word[i])
        i += 1
    return "".join(out)
