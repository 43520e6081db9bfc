"""What extraction knows while it walks an action: the cwd, and what earlier parts of the action or episode did."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from guardrail.gate.view import FsView, local_view

__all__ = ["Scope", "normalize_dist", "resolve_path"]

# Distribution names whose import name differs (pip install X, then import Y).
_DIST_TO_MODULE = {
    "pyyaml": "yaml", "pillow": "PIL", "scikit_learn": "sklearn", "beautifulsoup4": "bs4",
    "opencv_python": "cv2", "opencv_python_headless": "cv2", "python_dateutil": "dateutil",
    "attrs": "attr", "pyjwt": "jwt", "protobuf": "google", "msgpack_python": "msgpack",
    "typing_extensions": "typing_extensions", "setuptools": "pkg_resources",
}


def normalize_dist(spec: str) -> str | None:
    """The import name a `pip install` argument most likely provides ("PyYAML>=6" -> "yaml")."""
    name = re.split(r"[\s\[<>=!~;@]", spec.strip(), maxsplit=1)[0]
    if not name or "/" in name or name.startswith((".", "-")):
        return None
    key = name.lower().replace("-", "_").replace(".", "_")
    return _DIST_TO_MODULE.get(key, key)


def resolve_path(path: str, cwd: str) -> str:
    """`path` (``~`` and ``~user`` expanded) made absolute against `cwd`, normalised."""
    try:
        expanded = os.path.expanduser(path)
    except ValueError:  # `~name` with a NUL byte in the name: the user database refuses it, so no such user
        expanded = path
    return os.path.normpath(os.path.join(cwd, expanded))


@dataclass
class Scope:
    """Mutable extraction state for one action, seeded from the episode.

    `created` maps paths an earlier part of the action (or episode) creates to their text
    when known (a heredoc written with ``cat > a.py <<EOF``), so ``python a.py`` after it is
    analysed instead of flagged. `opaque` names an earlier command whose writes cannot be
    modelled (a script, make, git clone): missing paths after it are unknown, not false.
    """

    cwd: str
    workspace: str
    created: dict[str, str | None] = field(default_factory=dict)
    installed: set[str] = field(default_factory=set)
    install_unknown: bool = False
    opaque: str | None = None
    cwd_unknown: str | None = None
    pythonpath: tuple[str, ...] = ()
    path_dirs: tuple[str, ...] = ()  # directories this action put in front of PATH
    env_hedge: str | None = None  # why PYTHONPATH or PATH is unknown for the command in progress
    removed: dict[str, str] = field(default_factory=dict)  # path -> the command that removed it earlier
    oldpwd: str | None = None
    dirstack: list[str] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)
    depth: int = 0
    fs: FsView = field(default_factory=local_view)  # the gate's confined view: extraction reads through it too

    def is_dir(self, path: str) -> bool:
        return self.fs.stat(path).kind == "dir"

    def read_source(self, path: str) -> str | None:
        """The text of a file the action runs (a script), when it is readable under the roots."""
        return self.fs.read_text(path)

    def resolve(self, path: str) -> str:
        return resolve_path(path, self.cwd)

    def was_created(self, path: str) -> bool:
        if path in self.created:
            return True
        # A path under a created directory (mkdir -p a/b && touch a/b/c) counts as well.
        return any(path.startswith(p.rstrip("/") + "/") for p in self.created)

    def removed_by(self, path: str) -> str | None:
        """The command that removed `path` (or a directory above it) earlier in this action, if one did."""
        if not self.removed:
            return None
        if path in self.removed:
            return self.removed[path]
        for gone, by in self.removed.items():
            if path.startswith(gone.rstrip("/") + "/"):
                return by
        return None

    def remove(self, path: str, by: str) -> None:
        self.removed[path] = by
        for made in [p for p in self.created if p == path or p.startswith(path.rstrip("/") + "/")]:
            del self.created[made]

    def module_hedge(self, module: str, search: tuple[str, ...] = ()) -> str | None:
        """Why a missing module must count as unknown here: PYTHONPATH unknown, or written earlier in this action."""
        if self.env_hedge and self.env_hedge.startswith("PYTHONPATH"):
            return self.env_hedge
        top = module.partition(".")[0]
        for directory in (*search, self.cwd, *self.pythonpath):
            base = os.path.join(directory, top)
            if base + ".py" in self.created or base in self.created or self.was_created(base + os.sep):
                return "written earlier in this action"
        return None

    def create(self, path: str, text: str | None = None) -> None:
        self.removed.pop(path, None)
        self.created[path] = text
        parent = os.path.dirname(path)
        while parent and parent not in self.created and parent != os.path.dirname(parent):
            if self.is_dir(parent):
                break
            self.created[parent] = None
            parent = os.path.dirname(parent)

    def hedge(self) -> str | None:
        """Why a missing path must count as unknown at this point of the action, if it must."""
        return self.cwd_unknown or self.opaque

    def module_may_be_installed(self, module: str) -> bool:
        top = module.partition(".")[0]
        return self.install_unknown or top in self.installed or top.lower() in self.installed
