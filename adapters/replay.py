"""A private copy of a workspace and the recorded agent's own file edits replayed onto it (never onto the original).

`guardrail audit-traj` judges each recorded action against the files as the agent had left them:
the copy starts as the workspace and takes every edit the trajectory made before that action
(``str_replace_editor`` create/str_replace/insert/undo_edit, the ACI ``create``, ``edit`` in its
line-range, search/replace and cursor forms, ``insert``). An edit is applied only when it would
have worked (the old text occurs once, the line is in range, the file is absent for create) and
the recorded observation does not report an error, the way the agent's tool behaved. Writes stay
inside the copy: a path that leaves it (``..``, a symlink out) is refused, and nothing is run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["CopyTooLarge", "EditReplayer", "WorkspaceCopy"]

MAX_COPY_FILES = 200_000
MAX_COPY_BYTES = 4 << 30
MAX_EDIT_BYTES = 8 << 20  # a file the replay would have to read or write beyond this is left alone
_SKIP = {".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"}


class CopyTooLarge(RuntimeError):
    """The workspace is too big to copy for a replay (more files or bytes than the caps)."""


class WorkspaceCopy:
    """A temporary copy of `source` (symlinks kept as links, VCS and cache folders skipped), removed on exit."""

    def __init__(self, source: str | os.PathLike[str], *, max_files: int = MAX_COPY_FILES,
                 max_bytes: int = MAX_COPY_BYTES) -> None:
        self.source = Path(source).resolve()
        self._tmp = tempfile.mkdtemp(prefix="guardrail-replay-")
        self.root = Path(self._tmp) / (self.source.name or "workspace")
        counted = {"files": 0, "bytes": 0}

        def ignore(directory: str, names: list[str]) -> set[str]:
            skipped = {n for n in names if n in _SKIP}
            for name in names:
                if name in skipped:
                    continue
                counted["files"] += 1
                try:
                    counted["bytes"] += os.lstat(os.path.join(directory, name)).st_size
                except OSError:
                    pass
            if counted["files"] > max_files or counted["bytes"] > max_bytes:
                raise CopyTooLarge(f"{self.source}: more than {max_files} files or {max_bytes} bytes to copy")
            return skipped

        try:
            shutil.copytree(self.source, self.root, symlinks=True, ignore=ignore)
        except BaseException:
            self.cleanup()
            raise

    def __enter__(self) -> WorkspaceCopy:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def inside(self, path: str) -> Path | None:
        """`path` (already mapped into the copy) if it stays inside the copy once links are followed, else None."""
        candidate = Path(os.path.normpath(path))
        try:
            real = Path(os.path.realpath(candidate))
            root = Path(os.path.realpath(self.root))
        except (OSError, ValueError):
            return None
        return candidate if real == root or real.is_relative_to(root) else None

    def read(self, path: Path) -> str | None:
        try:
            if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_EDIT_BYTES:
                return None
            return path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return None

    def write(self, path: Path, text: str) -> bool:
        if len(text) > MAX_EDIT_BYTES or path.is_symlink() or self.inside(str(path)) is None:
            return False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
        except OSError:
            return False
        return True


# Observations that say the tool did not change the file (SWE-agent's editor and linting edit messages).
_FAILED = re.compile(r"No replacement was performed|did not appear verbatim|Your proposed edit has introduced new "
                     r"syntax error|have not been applied|Invalid `|does not exist|already exists|"
                     r"Cannot overwrite|No edit history|usage:|Usage:", re.IGNORECASE)


def _failed(observation: str | None) -> bool:
    return observation is not None and _FAILED.search(observation[:400]) is not None  # errors lead; file text follows


def _lines(text: str) -> list[str]:
    return text.split("\n")


@dataclass
class EditReplayer:
    """Replays one trajectory's edits onto a `WorkspaceCopy`, keeping the editor state the edits need."""

    copy: WorkspaceCopy
    open_file: str | None = None
    cursors: tuple[int, int] | None = None
    history: dict[str, list[str]] = field(default_factory=dict)  # path -> earlier contents (for undo_edit)
    applied: list[str] = field(default_factory=list)  # one line per edit applied, for the report

    def apply_editor(self, args: dict[str, Any], observation: str) -> None:
        """A ``str_replace_editor`` call (arguments already mapped into the copy)."""
        command, path = args.get("command"), args.get("path")
        if not isinstance(path, str) or _failed(observation):
            return
        target = self.copy.inside(path)
        if target is None:
            return
        if command == "create" and isinstance(args.get("file_text"), str):
            if not target.exists() and self.copy.write(target, args["file_text"]):
                self.history.setdefault(str(target), [])
                self.applied.append(f"create {target}")
        elif command == "str_replace" and isinstance(args.get("old_str"), str) and args["old_str"]:
            text = self.copy.read(target)
            new = args["new_str"] if isinstance(args.get("new_str"), str) else ""
            if text is not None and text.count(args["old_str"]) == 1:
                self._save(target, text, text.replace(args["old_str"], new, 1), "str_replace")
        elif command == "insert" and isinstance(args.get("new_str"), str) and isinstance(args.get("insert_line"), int):
            text = self.copy.read(target)
            if text is not None:
                lines = _lines(text)
                line = args["insert_line"]
                if 0 <= line <= len(lines):
                    self._save(target, text, "\n".join(lines[:line] + _lines(args["new_str"]) + lines[line:]),
                               "insert")
        elif command == "undo_edit":
            earlier = self.history.get(str(target))
            if earlier and self.copy.write(target, earlier.pop()):
                self.applied.append(f"undo_edit {target}")
        if command in ("view", "create") and target.is_file():
            self.open_file = str(target)

    def _save(self, target: Path, before: str, after: str, what: str) -> None:
        if self.copy.write(target, after):
            self.history.setdefault(str(target), []).append(before)
            self.applied.append(f"{what} {target}")

    def apply_aci(self, command: str, words: list[str], body: str, cwd: str, observation: str,
                  open_file: str | None = None) -> None:
        """An ACI line (``create``, ``open``, ``edit``, ``insert``, ``set_cursors``) of the windowed bundles."""
        if open_file:
            self.open_file = open_file
        if not words or _failed(observation):
            return
        name, args = words[0], words[1:]
        if name in ("open", "create") and args:
            target = self.copy.inside(os.path.join(cwd, args[0]))
            if target is None:
                return
            if name == "create" and not target.exists() and self.copy.write(target, ""):
                self.applied.append(f"create {target}")
            self.open_file, self.cursors = str(target), None
            return
        if name == "set_cursors" and len(args) == 2 and all(a.isdigit() for a in args):
            self.cursors = (int(args[0]), int(args[1]))
            return
        target = self.copy.inside(self.open_file) if self.open_file else None
        text = self.copy.read(target) if target is not None else None
        if target is None or text is None:
            return
        lines = _lines(text)
        replacement = _lines(body.rsplit("\nend_of_edit", 1)[0]) if body else []
        if name == "edit" and args and re.fullmatch(r"\d+:\d+", args[0]):
            start, end = (int(v) for v in args[0].split(":"))
            if 1 <= start <= len(lines) + 1 and start - 1 <= end:
                self._save(target, text, "\n".join(lines[:start - 1] + replacement + lines[end:]), "edit")
        elif name == "edit" and not args and body and self.cursors is not None:
            start, end = self.cursors
            if 1 <= start <= end <= len(lines):
                self._save(target, text, "\n".join(lines[:start - 1] + replacement + lines[end:]), "edit")
        elif name == "edit" and len(args) in (2, 3):
            search, replace = args[0], args[1]
            if search and search in text:
                replace_all = len(args) == 3 and args[2].lower() in ("true", "1", "yes")
                self._save(target, text, text.replace(search, replace, -1 if replace_all else 1), "edit")
        elif name == "insert" and len(args) == 2 and args[1].isdigit():
            line = int(args[1])
            if 0 <= line <= len(lines):
                self._save(target, text, "\n".join(lines[:line] + _lines(args[0]) + lines[line:]), "insert")
