"""The coding testbed's project: a real sdist fetched with pip (cached outside the repo) and an index of what it holds.

`fetch_sdist` runs ``pip download --no-deps --no-binary :all:`` once per (name, version) into the
cache (``$GUARDRAIL_CACHE`` or ``~/.cache/guardrail``) and unpacks it there; `ProjectIndex`
reads the unpacked tree with `ast` (files, dotted modules, top-level symbols, test node ids,
line counts) so the scripted agent can plan actions that refer to things that really exist,
and mutate them into near misses that do not.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEFAULT_PROJECT", "ProjectIndex", "cache_dir", "fetch_sdist"]

DEFAULT_PROJECT = ("more-itertools", "10.5.0")
MAX_FILES = 2000  # a bound on what one index reads from an unknown tree


def cache_dir() -> Path:
    return Path(os.environ.get("GUARDRAIL_CACHE") or Path.home() / ".cache" / "guardrail")


def fetch_sdist(name: str = DEFAULT_PROJECT[0], version: str = DEFAULT_PROJECT[1], *,
                cache: Path | None = None, timeout_s: float = 300.0) -> Path:
    """The unpacked source tree of `name==version`, downloading the sdist with pip on first use."""
    root = (cache or cache_dir()) / "sdists"
    unpacked = root / "src"
    stem = f"{name.replace('-', '_')}-{version}"
    for candidate in (unpacked / f"{name}-{version}", unpacked / stem):
        if (candidate / "PKG-INFO").is_file():
            return candidate
    root.mkdir(parents=True, exist_ok=True)
    archives = _archives(root, stem)
    if not archives:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
                   f"{name}=={version}", "-d", str(root)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip download of {name}=={version} failed (is PyPI reachable?): "
                               f"{done.stderr.strip()[-500:]}")
        archives = _archives(root, stem)
    if not archives:
        raise RuntimeError(f"pip download of {name}=={version} left no .tar.gz sdist in {root}")
    unpacked.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archives[0]) as archive:
        archive.extractall(unpacked, filter="data")  # the "data" filter refuses links and paths outside the target
        top = sorted({Path(m).parts[0] for m in archive.getnames() if m})
    return unpacked / top[0]


def _archives(root: Path, stem: str) -> list[Path]:
    # sdist names differ in - vs _ ("more-itertools-10.5.0.tar.gz" vs "more_itertools-10.5.0.tar.gz").
    wanted = stem.lower().replace("-", "_")
    return sorted(p for p in root.glob("*.tar.gz") if p.name.lower().replace("-", "_").startswith(wanted))


@dataclass
class ProjectIndex:
    """What a source tree holds, read with `ast` (never imported)."""

    root: Path
    files: list[str] = field(default_factory=list)  # .py files, relative to root
    modules: dict[str, str] = field(default_factory=dict)  # dotted module -> file
    symbols: dict[str, list[str]] = field(default_factory=dict)  # dotted module -> top-level public names
    test_nodes: list[str] = field(default_factory=list)  # "tests/test_x.py::Class::test_y"
    line_counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, root: str | os.PathLike[str]) -> ProjectIndex:
        index = cls(root=Path(root).resolve())
        for path in sorted(index.root.rglob("*.py"))[:MAX_FILES]:
            rel = path.relative_to(index.root).as_posix()
            if rel.startswith(("build/", "docs/", ".")):
                continue
            index.files.append(rel)
            source = path.read_text(encoding="utf-8", errors="replace")
            index.line_counts[rel] = len(source.splitlines())  # what an editor shows as the last line
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            parts = rel[:-3].split("/")
            is_test = parts[-1].startswith("test_")
            if is_test:
                index.test_nodes += _test_nodes(rel, tree)
            elif (index.root / parts[0] / "__init__.py").is_file() and parts[0] not in ("tests", "test"):
                dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                index.modules[dotted] = rel
                index.symbols[dotted] = [n.name for n in tree.body if isinstance(
                    n, ast.FunctionDef | ast.ClassDef) and not n.name.startswith("_")]
        return index

    def module_of(self, rel: str) -> str | None:
        return next((m for m, f in self.modules.items() if f == rel), None)


def _test_nodes(rel: str, tree: ast.Module) -> list[str]:
    nodes = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            nodes.append(f"{rel}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test") or (
                isinstance(node, ast.ClassDef) and node.name.endswith("Tests")):
            nodes += [f"{rel}::{node.name}::{item.name}" for item in node.body
                      if isinstance(item, ast.FunctionDef) and item.name.startswith("test")]
    return nodes
