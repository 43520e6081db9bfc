"""SWE-agent (v0, 1.x) and mini-swe-agent trajectories as episodes, through the adapters' own parsers.

A directory given is searched for ``*.traj`` and ``*.traj.json`` (SWE-agent writes one directory per
instance); links are not followed there. Each file is one episode, its id the file's name without
the extension (SWE-agent names a trajectory after its instance); a second file with the same name
gets a digest of its path. A file that cannot be read, is not a trajectory, or is not of the kind
asked for is one problem; the other files go on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from adapters.swe_agent import TrajError, episode_from_traj, read_traj
from guardrail.app.importers.store import Imported, problem

__all__ = ["FRAMEWORKS", "trajectory_episodes", "trajectory_files"]

FRAMEWORKS = ("swe-agent", "mini-swe-agent")
_SUFFIXES = (".traj.json", ".traj")
MAX_FILES = 100_000  # files one directory walk may yield


def _episode_name(path: Path) -> str:
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return path.stem or name


def trajectory_files(paths: Iterable[str | os.PathLike[str]], sink: list[Imported]) -> Iterator[Path]:
    """The files given, and the trajectories under the directories given (links there are not followed)."""
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = 0
            for root, dirs, files in os.walk(path):  # followlinks=False: a planted link leads nowhere
                dirs.sort()
                for name in sorted(files):
                    if not name.endswith(_SUFFIXES):
                        continue
                    file = Path(root) / name
                    if file.is_symlink():
                        sink.append(problem(str(file), "a symbolic link inside the directory: not followed, skipped"))
                        continue
                    found += 1
                    if found > MAX_FILES:
                        sink.append(problem(str(path), f"more than {MAX_FILES} trajectories: the rest is skipped"))
                        return
                    yield file
            if not found:
                sink.append(problem(str(path), "no *.traj or *.traj.json file in this directory"))
        elif path.is_file():
            yield path
        else:
            sink.append(problem(str(path), "no such file or directory: skipped"))


def trajectory_episodes(paths: Iterable[str | os.PathLike[str]], *, framework: str | None = None) -> Iterator[Imported]:
    """Each trajectory file as an episode (`framework`: accept only ``swe-agent`` or ``mini-swe-agent`` ones)."""
    sink: list[Imported] = []
    names: set[str] = set()
    for file in trajectory_files(paths, sink):
        yield from sink
        sink.clear()
        try:
            trajectory = read_traj(file)
            if framework is not None and trajectory.framework != framework:
                yield problem(str(file), f"a {trajectory.framework} trajectory, not a {framework} one (guardrail "
                                         f"import {trajectory.framework}, or import traj to take both): skipped")
                continue
            name = _episode_name(file)
            if name in names:
                name = f"{name}-{hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:8]}"
            names.add(name)
            episode = episode_from_traj(trajectory, episode_id=name)
        except TrajError as exc:
            yield problem(str(file), f"{str(exc).removeprefix(str(file) + ': ')}: skipped")
            continue
        except (RecursionError, ValueError, TypeError, AttributeError, KeyError) as exc:
            # read_traj validates the fields it uses; anything else a hostile file trips is this file's problem.
            yield problem(str(file), f"cannot be read as a trajectory ({type(exc).__name__}: {str(exc)[:200]}): skipped")
            continue
        episode.meta["source_file"] = file.name
        yield episode
    yield from sink
