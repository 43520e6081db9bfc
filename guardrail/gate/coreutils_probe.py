"""The sandbox's stats and small listings answered by one GNU ``find`` run by argv, no interpreter started.

A round-trip that starts the sandbox's Python costs ~10 ms before it does anything; ``find`` starts in
about one. Most decisions need nothing but stats (the paths the action names, the command lookups and
the revalidation of what recent decisions looked at) and, for a missing path, the listing of its
directory: `plan` turns such a batch into one ``find -P START... -maxdepth 1 -printf ...`` argv (every
path a start point, as data, never a shell line; each is absolute, so none reads as an option), and
`answer` rebuilds from its records exactly what `guardrail.gate.remote_probe.answer` would have said:
the same component walk from the root (`remote_probe.op_stat`), confinement included. Whatever the
records cannot settle (a symlink met under a root the agent can write, a file whose content is needed,
a listing that changed, an error other than "No such file or directory", a path that is not plain
ASCII) is left *unresolved* and goes to the probe program in a second round-trip, so answers never differ.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

from guardrail.gate import remote_probe

__all__ = ["FORMAT", "FindPlan", "FindRecords", "answer", "plan", "wire"]

# x|- (executable, following symlinks), depth, type, type following symlinks, mode, size, mtime, path
FORMAT = r"\0%d\0%y\0%Y\0%m\0%s\0%T@\0%p\0"
_FIELDS = 8
_ENOENT, _ENOTDIR = "No such file or directory", "Not a directory"
_OK_ERRORS = (_ENOENT, _ENOTDIR)
# How GNU find reports a start point it cannot stat, with LC_ALL=C: its argv[0] (the absolute path it was run by),
# the path quoted, a quote inside it escaped, then which error.
_ERROR = re.compile(r"/[\w/.-]*find: '((?:[^'\\]|\\')*)': (" + "|".join(map(re.escape, _OK_ERRORS)) + ")")
_RECORD = re.compile(r"[x-]\0[01]\0[fdlbcps]\0[fdlbcpsNL?]\0[0-7]{1,4}\0\d{1,20}\0\d{1,12}(\.\d{1,10})?")
_STAT_OPS = frozenset({"s", "sx", "lc", "rc", "sr"})
UNRESOLVED = object()  # an operation the records do not settle: the probe program answers it


def _plain(path: str) -> bool:
    return path.startswith("/") and path.isascii() and path.isprintable() and "\\" not in path


def _glob_escape(path: str) -> str:
    return "".join("\\" + ch if ch in "*?[]" else ch for ch in path)


def _prefixes(path: str, scope: Any, dir_links: Collection[str]) -> list[str]:
    """The paths the component walk of `path` lstats (below its root), the root itself, and `path`."""
    start = scope.start_of(path) if scope is not None else None
    if start is None or scope.trusts(path):
        # A plain stat: the path (find's error says how it is missing), and for a path known to be a symlink to a
        # directory (/bin -> usr/bin on merged-usr) the path with "/.": the directory stat() follows it to.
        return [path, path + "/."] if path in dir_links else [path]
    root = start[0]
    out = [root]
    current = root
    for part in path[len(root):].split("/"):
        if part:
            current = current + "/" + part if current != "/" else "/" + part
            out.append(current)
    return out


class FindPlan(NamedTuple):
    """One ``find`` run: its argv, and its start points (each must come back as a record or as a "missing" error)."""

    argv: list[str]
    starts: list[str]


def plan(find: str, operations: Sequence[tuple[Any, ...]], roots: Sequence[Any],
         dir_links: Collection[str] = ()) -> FindPlan | None:
    """The one ``find`` run that answers `operations` (as `remote_probe.answer` gets them: roots by index), or None when
    an operation needs more than stats and small listings. `dir_links`: paths an earlier run found to be symlinks to
    directories (`FindRecords.dir_links`); a plain stat of one also asks where it leads, one of another is left
    unresolved (the probe program answers it, and the next plan knows)."""
    starts: dict[str, None] = {}
    listed: dict[str, None] = {}
    for operation in operations:
        if operation[0] not in _STAT_OPS:
            return None
        path = operation[1]
        if not _plain(path):
            return None
        scope = roots[operation[2]] if len(operation) > 2 and operation[2] >= 0 else None
        for prefix in _prefixes(path, scope, dir_links):
            starts.setdefault(prefix, None)
        if operation[0] == "sx" and path != "/":
            parent = os.path.dirname(path)
            starts.setdefault(parent, None)
            listed.setdefault(parent, None)
    if not starts:
        return None
    descend: list[str] = []
    for directory in listed:
        descend += (["-o"] if descend else []) + ["-path", _glob_escape(directory)]
    argv = [find, "-P", *starts, "-maxdepth", "1", "(", "-executable", "-printf", "x", "-o", "-printf", "-", ")",
            "-printf", FORMAT]
    # Start points that are not listed are not descended into (-prune); listed ones give their entries too.
    argv += ["(", *descend, "-o", "-prune", ")"] if descend else ["-prune"]
    return FindPlan(argv, list(starts))


class FindRecords:
    """What one ``find`` run said: each start point's lstat, and the entries of the directories it listed.

    The run is `valid` only when every start point is accounted for, by a record or by an error line saying it is
    missing: a start point that is neither (stderr cut short by a transport, an error of another kind: permission
    denied, a loop) leaves nothing of the run used, so a lost line can never read as "missing"."""

    def __init__(self, stdout: str, stderr: str, starts: Sequence[str]) -> None:
        self.valid = True
        self.stats: dict[str, tuple[str, ...]] = {}
        self.entries: dict[str, list[tuple[str, ...]]] = {}
        self.missing: set[str] = set()  # start points that are not there (ENOENT)
        self.not_dir: set[str] = set()  # start points below a file (ENOTDIR)
        for line in stderr.splitlines():
            if not line.strip():
                continue
            error = _ERROR.fullmatch(line.rstrip())
            if error is None:
                self.valid = False  # permission denied, a loop, a cut line...: the probe program says what it is
                return
            (self.missing if error.group(2) == _ENOENT else self.not_dir).add(error.group(1).replace("\\'", "'"))
        fields = stdout.split("\0")
        if fields and fields[-1] == "":
            fields.pop()
        if len(fields) % _FIELDS:
            self.valid = False
            return
        for at in range(0, len(fields), _FIELDS):
            record = tuple(fields[at:at + _FIELDS])
            path = record[7]
            if not _plain(path) or _RECORD.fullmatch("\0".join(record[:7])) is None:
                self.valid = False  # not what find prints: nothing of this run is used
                return
            if record[1] == "0":
                self.stats[path] = record
            else:
                self.entries.setdefault(os.path.dirname(path), []).append(record)
        if any(start not in self.stats and start not in self.missing and start not in self.not_dir for start in starts):
            self.valid = False

    @property
    def dir_links(self) -> list[str]:
        """The start points that are symlinks to directories."""
        return [path for path, record in self.stats.items() if record[2] == "l" and record[3] == "d"]


def _state(record: tuple[str, ...]) -> tuple[str, int, int, bool, str]:
    kind = {"f": "file", "d": "dir"}.get(record[2], "other")
    seconds, _, fraction = record[6].partition(".")
    mtime_ns = int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])
    return (kind, mtime_ns, int(record[5]), bool(int(record[4], 8) & 0o111), "")


_MISSING = ("missing", 0, 0, False, "")
_NOT_DIR = ("missing", 0, 0, False, "a parent is a file, not a directory")


def _plain_stat(path: str, records: FindRecords) -> Any:
    """``os.stat`` (symlinks followed) from the records, for a path the agent cannot write."""
    record = records.stats.get(path)
    if record is None:
        # find lstat()s a start point; when that fails, stat() fails the same way (they differ only on a last
        # component that is a symlink, and then lstat succeeds).
        if path in records.missing:
            return _MISSING
        if path in records.not_dir:
            return _NOT_DIR
        parent = records.stats.get(os.path.dirname(path))
        if parent is not None and (parent[2] == "d" or parent[2] == "l" and parent[3] == "d"):
            return _MISSING
        return UNRESOLVED  # which error a missing parent gives is not known here
    if record[2] != "l":
        return _state(record)
    target = record[3]
    if target == "N":
        return _MISSING
    if target == "L":
        return ("loop", 0, 0, False, "symlink loop")
    if target == "d":
        followed = records.stats.get(path + "/.")
        return _state(followed) if followed is not None and followed[2] == "d" else UNRESOLVED
    if target == "f" and not path.endswith(".py"):
        # An executable behind a symlink (a venv's python, /usr/bin/python3): what a lookup asks is its kind and
        # whether it runs, which the records give; a module's content is keyed by the file's own stat: not here.
        return ("file", 0, 0, record[0] == "x", "")
    return UNRESOLVED


def _stat(path: str, scope: Any, records: FindRecords) -> Any:
    """`remote_probe.op_stat` from the records (UNRESOLVED where it needs what they do not hold)."""
    if scope is None or scope.trusts(path):
        return _plain_stat(path, records)
    start = scope.start_of(path)
    if start is None:
        return UNRESOLVED
    current = start[0]
    parts = [part for part in path[len(current):].split("/") if part]
    if not parts:
        return _plain_stat(path, records)
    record: tuple[str, ...] | None = None
    for index, part in enumerate(parts):
        current = current + "/" + part if current != "/" else "/" + part
        last = index == len(parts) - 1
        record = records.stats.get(current)
        if record is None:
            return _MISSING  # the directory above was walked: the one error left (stderr said so) is ENOENT
        if record[2] == "l":
            return UNRESOLVED  # where the symlink leads is the probe program's question
        if not last and record[2] != "d":
            return _NOT_DIR
    return _state(record) if record is not None else UNRESOLVED


def _context(operation: tuple[Any, ...], scope: Any, records: FindRecords) -> Any:
    """`remote_probe.op_stat_context` from the records."""
    path, names = operation[1], operation[4]
    state = _stat(path, scope, records)
    if state is UNRESOLVED:
        return UNRESOLVED
    if state[0] in ("file", "dir", "other", "outside"):
        return [state, [], None]
    ancestors: list[list[Any]] = []
    ancestor = os.path.dirname(path)
    kind = "missing"
    while ancestor:
        if scope is not None and not scope.holds_lexically(ancestor):
            kind = "outside"
            break
        found = _stat(ancestor, scope, records)
        if found is UNRESOLVED:
            return UNRESOLVED
        ancestors.append([ancestor, found])
        kind = found[0]
        if kind in ("dir", "outside") or ancestor == os.path.dirname(ancestor):
            break
        ancestor = os.path.dirname(ancestor)
    listing: Any = None
    if kind == "dir":
        if ancestor not in records.entries and ancestor != os.path.dirname(path):
            return UNRESOLVED  # the nearest directory is higher up: not listed in this run
        entries = records.entries.get(ancestor, [])
        if len(entries) > operation[3]:
            listing = None
        elif len(entries) > names:
            listing = remote_probe._SKIPPED
        else:
            listing = (ancestors[-1][1][1], [os.path.basename(record[7]) for record in entries])
    return [state, ancestors, listing]


_KIND_HEX = {kind: kind.encode().hex() for kind in ("file", "dir", "other", "missing", "loop")}


def wire(value: Any) -> Any:
    """What ``json.loads`` gives for `remote_probe._encode`'s text of `value` (strings hex-encoded, sequences as
    lists), built directly: the backend's answers from `find` records take this form without a JSON round-trip."""
    if type(value) is tuple and len(value) == 5 and value[0] in _KIND_HEX and value[4] == "":
        return [_KIND_HEX[value[0]], value[1], value[2], value[3], ""]  # a state, the common answer: no recursion
    if value is None or value is True or value is False or type(value) is int:
        return value
    if type(value) is str:
        try:
            return value.encode("utf-8", "surrogateescape").hex()
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").hex()
    if type(value) is bytes:
        return value.hex()
    if isinstance(value, int):  # a subclass: bool is handled above, anything else reads as its integer
        return int(value)
    return [wire(item) for item in value]


def answer(operations: Sequence[tuple[Any, ...]], roots: Sequence[Any], records: FindRecords) -> list[Any]:
    """One answer per operation, as `remote_probe.answer` gives them, or UNRESOLVED."""
    out: list[Any] = []
    for operation in operations:
        name = operation[0]
        scope = roots[operation[2]] if len(operation) > 2 and operation[2] >= 0 else None
        if name == "sx":
            out.append(_context(operation, scope, records))
            continue
        state = _stat(operation[1], scope, records)
        if name == "s" or state is UNRESOLVED:
            out.append(state)
        elif name == "lc":
            same = state[0] == "dir" and state[1] == operation[4]
            out.append(remote_probe._SAME if same else UNRESOLVED)
        elif name == "rc":
            same = state[0] == "file" and (state[1], state[2]) == (operation[4], operation[5])
            out.append(remote_probe._SAME if same else UNRESOLVED)
        elif name == "sr":
            held = state[0] == "file" and (state[1], state[2]) == (operation[4], operation[5])
            if held:
                out.append([state, remote_probe._SAME])
            elif state[0] == "file" and state[2] <= operation[3]:
                out.append(UNRESOLVED)  # its content is needed: the probe program reads it
            else:
                out.append([state, remote_probe._SKIPPED])
        else:
            out.append(UNRESOLVED)
    return out
