"""A git repository's refs and objects read as files through the gate's confined view (git itself is never run).

The repository belongs to the agent: its config can make a ``git`` command run programs (hooks,
fsmonitor, aliases), so the gate reads the few files a revision lookup needs instead: ``HEAD``,
``refs/``, ``packed-refs``, loose object names and pack indexes (version 2), all bounded in count and
bytes. What this reading cannot settle (a reflog ``@{...}``, an ancestor of a packed commit, an
index over the read cap, an alternates file) is unknown, never false.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass

from guardrail.gate import budget
from guardrail.gate.view import FsView

__all__ = ["GitRepo", "Resolution", "open_repo", "resolve_revision"]

_MAX_REFS = 10_000  # refs listed per repository; past that a missing name is unknown
_MAX_REF_DEPTH = 8
_HEX = re.compile(r"[0-9a-f]{4,40}")
_SUFFIX = re.compile(r"(?:~\d*|\^\d*|\^\{[^}]*\})+$")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._/+\-]{1,255}")
_SPECIAL_HEADS = ("HEAD", "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD")


def _bytes(fs: FsView, path: str, cap: int) -> bytes | None:
    text = fs.read_text(path, cap)
    return None if text is None else text.encode("utf-8", "surrogateescape")  # read_text keeps undecodable bytes


@dataclass
class GitRepo:
    """Where a repository keeps its HEAD (`git_dir`) and its refs and objects (`common_dir`, for a worktree)."""

    worktree: str
    git_dir: str
    common_dir: str
    fs: FsView
    _refs: tuple[dict[str, str], bool] | None = None  # full ref name -> its line; whether the listing is complete

    def refs(self) -> tuple[dict[str, str], bool]:
        """Every ref name (``refs/heads/main``...) with what it holds, and whether the listing is complete."""
        if self._refs is None:
            found: dict[str, str] = {}
            complete = self._walk(os.path.join(self.common_dir, "refs"), "refs", found, 0)
            packed = self.fs.read_text(os.path.join(self.common_dir, "packed-refs"))
            if packed is None and self.fs.stat(os.path.join(self.common_dir, "packed-refs")).exists:
                complete = False
            for line in (packed or "").splitlines()[:_MAX_REFS]:
                parts = line.split(" ", 1)
                if len(parts) == 2 and not line.startswith(("#", "^")):
                    found.setdefault(parts[1].strip(), parts[0].strip())
            self._refs = (found, complete)
        return self._refs

    def _walk(self, directory: str, prefix: str, found: dict[str, str], depth: int) -> bool:
        names = self.fs.list_dir(directory)
        if names is None:
            return not self.fs.stat(directory).exists
        complete = depth < _MAX_REF_DEPTH
        for name in sorted(names):
            budget.check("git refs")
            if len(found) >= _MAX_REFS or depth >= _MAX_REF_DEPTH:
                return False
            path = os.path.join(directory, name)
            kind = self.fs.stat(path).kind
            if kind == "dir":
                complete = self._walk(path, f"{prefix}/{name}", found, depth + 1) and complete
            elif kind == "file":
                found[f"{prefix}/{name}"] = (self.fs.read_text(path, 4096) or "").strip()
        return complete

    def head(self) -> str | None:
        """The text of HEAD (``ref: refs/heads/main`` or a commit id), None when unreadable."""
        text = self.fs.read_text(os.path.join(self.git_dir, "HEAD"), 4096)
        return None if text is None else text.strip()

    def object_exists(self, prefix: str) -> bool | None:
        """Whether an object id starting with `prefix` (4 to 40 hex digits) is stored; None when it cannot be told."""
        objects = os.path.join(self.common_dir, "objects")
        loose = self.fs.list_dir(os.path.join(objects, prefix[:2]))
        rest = prefix[2:]
        if loose is not None and any(name.startswith(rest) for name in loose):
            return True
        unknown = self.fs.stat(os.path.join(objects, "info", "alternates")).exists
        packs = self.fs.list_dir(os.path.join(objects, "pack")) or frozenset()
        for name in sorted(n for n in packs if n.endswith(".idx"))[:64]:
            budget.check("git pack index")
            found = _idx_has(_bytes(self.fs, os.path.join(objects, "pack", name), 8 * 1024 * 1024), prefix)
            if found:
                return True
            unknown = unknown or found is None
        return None if unknown else False

    def tracked(self) -> frozenset[str] | None:
        """The paths the index holds (relative to the working tree); None when it cannot be read (a version-4
        index, a split index, one over the read cap)."""
        raw = _bytes(self.fs, os.path.join(self.git_dir, "index"), 8 * 1024 * 1024)
        if raw is None:
            return frozenset() if not self.fs.stat(os.path.join(self.git_dir, "index")).exists else None
        return _index_paths(raw)

    def parents(self, commit: str) -> list[str] | None:
        """A loose commit's parent ids; None when the object is packed, not a commit or unreadable."""
        if len(commit) != 40 or not _HEX.fullmatch(commit):
            return None
        raw = _bytes(self.fs, os.path.join(self.common_dir, "objects", commit[:2], commit[2:]), 1024 * 1024)
        if raw is None:
            return None
        try:
            data = zlib.decompressobj().decompress(raw, 256 * 1024)
        except zlib.error:
            return None
        header, _, body = data.partition(b"\x00")
        if not header.startswith(b"commit "):
            return None
        out = []
        for line in body.split(b"\n"):
            if not line:
                break
            if line.startswith(b"parent "):
                out.append(line[7:].decode("ascii", "replace").strip())
        return out

    def commit_of(self, full_ref: str, depth: int = 0) -> str | None:
        """The commit id a ref names (following symbolic refs); None when it cannot be read."""
        if depth > 5:
            return None
        if full_ref in _SPECIAL_HEADS:
            value = self.head() if full_ref == "HEAD" else (
                self.fs.read_text(os.path.join(self.git_dir, full_ref), 4096) or "").strip()
        else:
            value = self.refs()[0].get(full_ref)
        if not value:
            return None
        if value.startswith("ref:"):
            return self.commit_of(value[4:].strip(), depth + 1)
        head = value.split()[0] if value.split() else ""
        return head if _HEX.fullmatch(head) and len(head) == 40 else None


def _index_paths(data: bytes) -> frozenset[str] | None:
    """The entry paths of a version 2 or 3 index file (``DIRC``), None for anything else or a malformed one."""
    if len(data) < 12 or data[:4] != b"DIRC" or int.from_bytes(data[4:8], "big") not in (2, 3):
        return None
    count = int.from_bytes(data[8:12], "big")
    paths: list[str] = []
    at = 12
    for _ in range(min(count, 1_000_000)):
        if at + 62 > len(data):
            return None
        flags = int.from_bytes(data[at + 60:at + 62], "big")
        start = at + 62 + (2 if flags & 0x4000 else 0)  # an extended entry (version 3) has two more flag bytes
        end = data.find(b"\x00", start)
        if end < 0:
            return None
        paths.append(data[start:end].decode("utf-8", "surrogateescape"))
        at += (end - at + 8) // 8 * 8  # entries are NUL-padded to a multiple of eight bytes
        if not len(paths) & 4095:
            budget.check("git index")
    return frozenset(paths) if len(paths) == count else None


def _idx_has(data: bytes | None, prefix: str) -> bool | None:
    """Whether a version-2 pack index lists an id starting with `prefix` (binary search over its sorted ids)."""
    if data is None or len(data) < 8 + 256 * 4 or data[:4] != b"\xfftOc" or int.from_bytes(data[4:8], "big") != 2:
        return None
    first = int(prefix[:2], 16)
    fanout = [int.from_bytes(data[8 + 4 * i:12 + 4 * i], "big") for i in (first - 1, first)] if first else \
        [0, int.from_bytes(data[8:12], "big")]
    low, high = fanout
    total = int.from_bytes(data[8 + 255 * 4:8 + 256 * 4], "big")
    base = 8 + 256 * 4
    if base + total * 20 > len(data) or high > total or low > high:
        return None
    want = prefix.lower()
    while low < high:  # the first id >= prefix
        middle = (low + high) // 2
        if data[base + middle * 20:base + middle * 20 + 20].hex() < want:
            low = middle + 1
        else:
            high = middle
    return low < total and data[base + low * 20:base + low * 20 + 20].hex().startswith(want)


def open_repo(fs: FsView, path: str) -> tuple[GitRepo | None, str]:
    """The repository whose working tree (or bare directory) is `path`, or None and why not."""
    dot = os.path.join(path, ".git")
    state = fs.stat(dot)
    git_dir: str | None = None
    if state.kind == "dir":
        git_dir = dot
    elif state.kind == "file":  # a worktree or submodule: "gitdir: <path>"
        text = (fs.read_text(dot, 4096) or "").strip()
        if text.startswith("gitdir:"):
            git_dir = os.path.normpath(os.path.join(path, text[7:].strip()))
    elif fs.stat(os.path.join(path, "HEAD")).kind == "file" and fs.stat(os.path.join(path, "objects")).kind == "dir":
        git_dir = path  # a bare repository
    if git_dir is None:
        return None, f"{path} is not the root of a git repository (no .git there)"
    common = git_dir
    pointer = fs.read_text(os.path.join(git_dir, "commondir"), 4096)
    if pointer and pointer.strip():
        common = os.path.normpath(os.path.join(git_dir, pointer.strip()))
    return GitRepo(path, git_dir, common, fs), ""


@dataclass(frozen=True)
class Resolution:
    """What a revision lookup found: holds (True/False/None for unknown), why, and the names to suggest."""

    holds: bool | None
    why: str
    candidates: tuple[str, ...] = ()


def short_names(refs: dict[str, str]) -> list[str]:
    """The names a person types for the refs: ``main``, ``v1.0``, ``origin/main``."""
    out = []
    for name in refs:
        for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/"):
            if name.startswith(prefix):
                out.append(name[len(prefix):])
    return sorted(set(out))


def _lookup_ref(repo: GitRepo, name: str) -> str | None:
    """The full ref a short name resolves to, in git's order (gitrevisions(7)); None when none does."""
    refs = repo.refs()[0]
    if name in _SPECIAL_HEADS:
        return name if (name == "HEAD" or repo.fs.stat(os.path.join(repo.git_dir, name)).kind == "file") else None
    for full in (name, f"refs/{name}", f"refs/tags/{name}", f"refs/heads/{name}", f"refs/remotes/{name}",
                 f"refs/remotes/{name}/HEAD"):
        if full in refs:
            return full
    return None


def _base(repo: GitRepo, name: str, *, refs_only: bool) -> Resolution:
    """Whether one revision name without suffixes names something in `repo`."""
    if name in ("", "@"):
        name = "HEAD"
    full = _lookup_ref(repo, name)
    if full is not None:
        if full == "HEAD" and repo.commit_of("HEAD") is None:
            head = repo.head() or ""
            if head.startswith("ref:") and repo.refs()[1]:
                return Resolution(False, f"HEAD points at {head[4:].strip()}, which has no commit yet")
            return Resolution(None, "HEAD could not be read")
        return Resolution(True, f"{name} is {full}")
    refs, complete = repo.refs()
    names = tuple(short_names(refs))
    if not refs_only and _HEX.fullmatch(name.lower()):
        stored = repo.object_exists(name.lower())
        if stored is None:
            return Resolution(None, f"whether an object {name} is stored could not be read")
        if stored:
            return Resolution(True, f"object {name} is stored")
        return Resolution(False, f"no ref and no object named {name}", names)
    if not complete:
        return Resolution(None, f"the repository has more refs than the gate lists: {name} not found among them")
    if not _PLAIN_NAME.fullmatch(name):
        return Resolution(None, f"{name!r} is not a plain ref name: not resolved")
    what = "branch, tag or remote branch" if refs_only else "ref or commit"
    return Resolution(False, f"no {what} named {name!r} in {repo.worktree}", names)


def _walk_suffix(repo: GitRepo, start: str, suffix: str) -> Resolution | None:
    """Follow ``~N`` / ``^N`` through loose commits; None when a step cannot be read (a packed commit, ``^{}``)."""
    commit = start
    for step in re.findall(r"~\d*|\^\d*|\^\{[^}]*\}", suffix):
        if step.startswith("^{"):
            return None
        count = int(step[1:] or 1)
        if step.startswith("^"):  # ^N: the N-th parent (^0 is the commit itself)
            if count == 0:
                continue
            parents = repo.parents(commit)
            if parents is None:
                return None
            if count > len(parents):
                return Resolution(False, f"commit {commit[:12]} has {len(parents)} parent(s): no parent {count}")
            commit = parents[count - 1]
            continue
        for walked in range(count):  # ~N: N first parents back
            budget.check("git ancestry")
            parents = repo.parents(commit)
            if parents is None:
                return None
            if not parents:
                return Resolution(False, f"{step} goes back past the first commit (the history there has "
                                         f"{walked + 1} commit(s))")
            commit = parents[0]
    return Resolution(True, f"resolves to {commit[:12]}")


def resolve_revision(repo: GitRepo, revision: str, *, refs_only: bool = False, ranges: bool = True) -> Resolution:
    """Whether `revision` names something in `repo`: a ref (short or full), a stored object id, either with
    ``~N`` / ``^N`` suffixes, a ``rev:path`` (the revision part) or, with `ranges`, an ``A..B`` range.
    `refs_only` accepts only ref names (what ``repo.references[name]`` takes)."""
    if revision.startswith("-"):
        return Resolution(False, f"a revision cannot start with '-' (got {revision[:60]!r})")
    if "@{" in revision or revision.startswith(":") or len(revision) > 1000:
        return Resolution(None, f"{revision[:60]!r} is not resolved without git (reflog, index path or too long)")
    if refs_only:
        return _base(repo, revision, refs_only=True)
    if ".." in revision and not ranges and ":" not in revision.split("..")[0]:
        return Resolution(False, f"{revision[:200]!r} is a range: this takes one revision (one end of it)")
    if ".." in revision:
        parts = [p for p in re.split(r"\.\.\.?", revision, maxsplit=1)]
        results = [resolve_revision(repo, p) for p in parts if p]
        false = [r for r in results if r.holds is False]
        if false:
            return false[0]
        return Resolution(None if any(r.holds is None for r in results) else True, "every end of the range resolves")
    name = revision.split(":", 1)[0] if ":" in revision else revision
    found = _SUFFIX.search(name)
    suffix = found.group(0) if found else ""
    base = name[:len(name) - len(suffix)] if suffix else name
    resolution = _base(repo, base, refs_only=False)
    if resolution.holds is not True or not suffix:
        return resolution
    full = _lookup_ref(repo, base or "HEAD")
    start = repo.commit_of(full) if full else None
    if start is None and _HEX.fullmatch(base.lower()) and len(base) == 40:
        start = base.lower()
    walked = _walk_suffix(repo, start, suffix) if start else None
    return walked if walked is not None else Resolution(None, f"{base} exists; {suffix} is not followed here")
