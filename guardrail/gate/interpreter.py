"""The target interpreter's import paths, learned without running anything the agent can write.

A venv is read as text: its ``pyvenv.cfg`` names the base interpreter (``home``), and its
site-packages are derived from the layout. Only that base is ever run, and only when it lies
outside the untrusted roots (the workspace and whatever else the agent can write): it is asked
for its own ``sys.path`` with ``-I -S -B`` from ``/``, so no cwd entry, no environment variable,
no ``.pth`` line, no sitecustomize runs and no ``.pyc`` is written. ``.pth`` files are read as
text, never run. An interpreter inside the untrusted roots, a venv whose ``home`` is inside them,
or a base that is not a native executable is never run: the gate's import predicates are then
unknown and a finding says why.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from guardrail.core.pysyntax import parse_python
from guardrail.gate.backend import Roots, taints

if TYPE_CHECKING:
    from guardrail.gate.backend import ProbeBackend

__all__ = ["TargetPython", "TargetPythonError", "target_python"]

_QUERY = r"""
import sys, json, site, importlib.machinery as m
venv = sys.argv[1] if len(sys.argv) > 2 else ""
own = [sys.prefix, sys.exec_prefix]
prefixes = ([venv] + (own if sys.argv[2] == "system" else [])) if venv else own
print(json.dumps({
    "executable": sys.executable,
    "path": [p for p in sys.path if p],
    "site": site.getsitepackages(prefixes),
    "builtins": list(sys.builtin_module_names),
    "stdlib": sorted(getattr(sys, "stdlib_module_names", ())),
    "version": list(sys.version_info[:3]),
    "ext": list(m.EXTENSION_SUFFIXES),
}))
"""
# First bytes of a native executable (ELF, Mach-O thin and fat, PE): a script named python is not one.
_NATIVE_MAGIC = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                 b"\xca\xfe\xba\xbe", b"MZ")
_MAX_CFG_BYTES = 64 * 1024
_MAX_PTH_BYTES = 1 << 20


class TargetPythonError(RuntimeError):
    """The target interpreter's paths could not be learned; `refused` when the gate would not run it."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class TargetPython:
    """What the agent's interpreter would search, learned without running any of its packages' code."""

    executable: str
    sys_path: tuple[str, ...]
    builtins: frozenset[str]
    stdlib: frozenset[str]
    version: tuple[int, int, int]
    ext_suffixes: tuple[str, ...]
    editable: dict[str, str] = field(default_factory=dict)  # top-level name -> path, from editable finders
    import_hooks: tuple[str, ...] = ()  # .pth import lines this index did not run (they may add modules)
    # Import-path directories outside the untrusted roots that the gate may read (the base's stdlib, a
    # trusted site-packages and what its .pth files add); entries added by a .pth file the agent can
    # write are searched only where they lie under the untrusted roots themselves.
    import_roots: tuple[str, ...] = ()
    base_executable: str = ""  # the interpreter that was actually run
    venv: str | None = None
    site_dirs: tuple[str, ...] = ()  # the site-packages whose .pth files were read


# (exe, untrusted roots) -> (fingerprint, target), and ("asked", base, venv, system) -> (mtime, the base's answer):
# one dict, so emptying it makes the next target fully cold.
_TARGETS: dict[tuple[str, ...], tuple[Any, Any]] = {}
_TARGETS_LOCK = threading.Lock()


def _backend(backend: ProbeBackend | None) -> ProbeBackend:
    if backend is not None:
        return backend
    from guardrail.gate.backend import LocalBackend

    return LocalBackend()


def _inside(path: str, roots: Roots, backend: ProbeBackend | None = None) -> bool:
    """Whether `path`, as written or with symlinks resolved (on the backend's machine), lies under the untrusted
    roots; True when that cannot be told."""
    normal = os.path.normpath(os.path.abspath(path))
    if roots.holds_lexically(normal):
        return True
    resolve = getattr(backend, "realpath", None)  # a backend whose filesystem is not this machine's resolves there
    try:
        return roots.holds_really(resolve(normal) if resolve is not None else os.path.realpath(normal))
    except (OSError, ValueError):
        return True


def _read_text(backend: ProbeBackend, path: str, cap: int) -> str | None:
    data = backend.read_prefix(path, None, cap)
    if data is None or len(data) > cap:
        return None
    return data.decode("utf-8", errors="replace")


def _parse_cfg(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    return values


def _mtime(backend: ProbeBackend, path: str) -> int:
    state = backend.stat_many([path], None)[0]
    return state.mtime_ns if state.exists else -1


def _find_venv(backend: ProbeBackend, exe: str) -> tuple[str, dict[str, str]] | None:
    """The venv an executable belongs to: a pyvenv.cfg beside it or one level up (where CPython looks)."""
    for directory in (os.path.dirname(exe), os.path.dirname(os.path.dirname(exe))):
        cfg_path = os.path.join(directory, "pyvenv.cfg")
        if backend.stat_many([cfg_path], None)[0].kind == "file":
            text = _read_text(backend, cfg_path, _MAX_CFG_BYTES)
            if text is None:
                raise TargetPythonError(f"cannot read {cfg_path}")
            return directory, _parse_cfg(text)
    return None


def _base_of(backend: ProbeBackend, venv: str, cfg: dict[str, str], untrusted: Roots) -> str:
    """The base interpreter a venv's pyvenv.cfg names, if the gate may run it."""
    home = cfg.get("home", "")
    if not home or not os.path.isabs(home):
        raise TargetPythonError(f"{venv}/pyvenv.cfg names no absolute home directory")
    if _inside(home, untrusted, backend):
        raise TargetPythonError(f"the venv's home {home} is inside the workspace: its interpreter is never run",
                                refused=True)
    version = cfg.get("version_info") or cfg.get("version") or ""
    short = ".".join(version.split(".")[:2])
    candidates = [cfg.get("executable", "")] + [os.path.join(home, name) for name in
                                                 (f"python{short}" if short else "", "python3", "python") if name]
    for candidate in candidates:
        if not candidate or not os.path.isabs(candidate):
            continue
        state = backend.stat_many([candidate], None)[0]
        if state.kind == "file" and state.executable:
            if _inside(candidate, untrusted, backend):
                raise TargetPythonError(f"the venv's base interpreter {candidate} is inside the workspace: "
                                        "it is never run", refused=True)
            if _inside(venv, untrusted, backend):  # the cfg is the agent's: the base must at least be a real binary
                head = backend.read_prefix(candidate, None, 8) or b""
                if not head.startswith(_NATIVE_MAGIC):
                    raise TargetPythonError(f"the venv's base interpreter {candidate} is not a native "
                                            "executable: it is never run", refused=True)
            return candidate
    raise TargetPythonError(f"no interpreter found in the venv's home {home}")


def _locate(backend: ProbeBackend, exe: str, untrusted: Roots) -> tuple[str, str | None, dict[str, str]]:
    """(the base interpreter to ask, the venv directory or None, the venv's settings)."""
    found = _find_venv(backend, exe)
    if found is None:
        if _inside(exe, untrusted, backend):
            raise TargetPythonError(f"target interpreter {exe} is inside the workspace: it is never run",
                                    refused=True)
        return exe, None, {}
    venv, cfg = found
    base = _base_of(backend, venv, cfg, untrusted)
    for _ in range(3):  # a venv made from another venv's interpreter: follow to the real base
        nested = _find_venv(backend, base)
        if nested is None:
            break
        base = _base_of(backend, nested[0], nested[1], untrusted)
    return base, venv, cfg


def _fingerprint(backend: ProbeBackend, exe: str) -> tuple[tuple[str, int], ...]:
    paths = [exe, os.path.join(os.path.dirname(exe), "pyvenv.cfg"),
             os.path.join(os.path.dirname(os.path.dirname(exe)), "pyvenv.cfg")]
    return tuple((path, _mtime(backend, path)) for path in paths)


def target_python(python: str | None = None, *, untrusted: Roots | None = None, backend: ProbeBackend | None = None,
                  timeout_s: float = 10.0) -> TargetPython:
    """The target interpreter's search path, asked once per interpreter and cached while its files are unchanged.

    `python` is an absolute path or a command name looked up on PATH (default: this process's
    interpreter); `untrusted` the roots the agent can write, where nothing is ever run.
    """
    local = _backend(backend)
    roots = untrusted or Roots()
    # A backend for another machine names that machine's default interpreter and searches its PATH.
    default = getattr(local, "default_python", None)
    exe = python or (default() if default is not None else None) or sys.executable
    if not os.path.isabs(exe):
        find = getattr(local, "find_program", None) or shutil.which
        found = find(exe) if os.sep not in exe else None
        if found is None:
            raise TargetPythonError(f"target interpreter {exe!r} is not an absolute path and not on PATH")
        exe = found
    exe = os.path.normpath(exe)
    unanswered = taints()
    if local.stat_many([exe], None)[0].kind != "file":
        raise TargetPythonError(f"target interpreter {exe!r} not found")
    key = (local.key, exe, *roots.lexical, "\x00", *roots.real)
    fingerprint = _fingerprint(local, exe)
    cached = _TARGETS.get(key)
    # Valid while the interpreter, its pyvenv.cfg and its site dirs (a new .pth changes their mtime) are unchanged.
    if cached is not None and cached[0] == fingerprint + _site_fingerprint(local, cached[1]):
        return cached[1]  # type: ignore[no-any-return]
    base, venv, cfg = _locate(local, exe, roots)
    facts = _asked(local, base, venv, cfg, timeout_s)
    if venv is not None:
        wanted = ".".join((cfg.get("version_info") or cfg.get("version") or "").split(".")[:2])
        got = ".".join(str(v) for v in facts["version"][:2])
        if wanted and wanted != got:
            raise TargetPythonError(f"{venv}/pyvenv.cfg says Python {wanted} but its home runs {got}")
    target = _assemble(local, exe, base, venv, facts, roots)
    if taints() != unanswered:  # a probe went unanswered while learning it: the target is used, not kept
        return target
    with _TARGETS_LOCK:
        _TARGETS[key] = (fingerprint + _site_fingerprint(local, target), target)
    return target


def _site_fingerprint(backend: ProbeBackend, target: TargetPython) -> tuple[tuple[str, int], ...]:
    return tuple((path, _mtime(backend, path)) for path in target.site_dirs)


def _asked(backend: ProbeBackend, base: str, venv: str | None, cfg: dict[str, str],
           timeout_s: float) -> dict[str, Any]:
    """The base's answer, asked once per base interpreter and venv (a new workspace reuses it: only the
    static part, which depends on the workspace roots, is redone)."""
    key = ("asked", backend.key, base, venv or "", cfg.get("include-system-site-packages", "").lower())
    mtime = _mtime(backend, base)
    cached = _TARGETS.get(key)
    if cached is not None and cached[0] == mtime:
        return cached[1]  # type: ignore[return-value]
    facts = _ask(base, venv, cfg, timeout_s, backend)
    with _TARGETS_LOCK:
        _TARGETS[key] = (mtime, facts)
    return facts


def _ask(base: str, venv: str | None, cfg: dict[str, str], timeout_s: float,
         backend: ProbeBackend | None = None) -> dict[str, Any]:
    """Ask the trusted base interpreter for its own paths (and a venv prefix's site dirs, computed by its site.py),
    on the backend's machine (``run_python``) when that is not this one."""
    system = "system" if cfg.get("include-system-site-packages", "").lower() == "true" else "nosystem"
    argv = [base, "-I", "-S", "-B", "-c", _QUERY] + ([venv, system] if venv else [])
    run = getattr(backend, "run_python", None)
    if run is not None:
        outcome = run(argv, timeout_s)
        if outcome is None:
            raise TargetPythonError(f"cannot run target interpreter {base!r} in the sandbox")
        returncode, stdout, stderr = outcome
    else:
        try:
            proc = subprocess.run(argv, cwd=os.path.abspath(os.sep), capture_output=True, text=True,
                                  timeout=timeout_s,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"})
        except (OSError, subprocess.SubprocessError) as exc:
            raise TargetPythonError(f"cannot run target interpreter {base!r}: {exc}") from exc
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    if returncode != 0:
        raise TargetPythonError(f"target interpreter {base!r} failed: {stderr.strip()[-500:]}")
    try:
        facts = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise TargetPythonError(f"target interpreter {base!r} gave no path list: {exc}") from exc
    if not isinstance(facts, dict) or not isinstance(facts.get("path"), list):
        raise TargetPythonError(f"target interpreter {base!r} gave no path list")
    return facts


def _assemble(backend: ProbeBackend, exe: str, base: str, venv: str | None, facts: dict[str, Any],
              untrusted: Roots) -> TargetPython:
    entries = [str(p) for p in facts["path"]]
    major, minor, micro = (list(facts.get("version", [])) + [0, 0, 0])[:3]
    import_roots = [p for p in entries if not _inside(p, untrusted, backend)]
    editable: dict[str, str] = {}
    hooks: list[str] = []
    site_dirs: list[str] = []
    for site_dir in [str(s) for s in facts.get("site", [])]:
        if backend.stat_many([site_dir], None)[0].kind != "dir" or site_dir in entries:
            continue
        trusted = not _inside(site_dir, untrusted, backend)
        entries.append(site_dir)
        site_dirs.append(site_dir)
        if trusted:
            import_roots.append(site_dir)
        found_editable: dict[str, str] = {}
        added = _read_pth_files(backend, site_dir, entries, found_editable, hooks, untrusted)
        editable.update(found_editable)
        if trusted:  # what a trusted site dir adds is as trusted as the site dir
            import_roots.extend(added)
            import_roots.extend(found_editable.values())
    return TargetPython(
        executable=exe,
        sys_path=tuple(entries),
        builtins=frozenset(str(n) for n in facts.get("builtins", [])),
        stdlib=frozenset(str(n) for n in facts.get("stdlib", [])),
        version=(int(major), int(minor), int(micro)),
        ext_suffixes=tuple(str(s) for s in facts.get("ext", [])),
        editable=editable,
        import_hooks=tuple(hooks),
        import_roots=tuple(dict.fromkeys(import_roots)),
        base_executable=base,
        venv=venv,
        site_dirs=tuple(site_dirs),
    )


def _read_pth_files(backend: ProbeBackend, site_dir: str, entries: list[str], editable: dict[str, str],
                    hooks: list[str], untrusted: Roots) -> list[str]:
    """Apply a site dir's .pth path lines as site.py would, reading import lines instead of running them."""
    listing = backend.list_dir(site_dir, None, 100_000)
    names = sorted(n for n in (listing[1] if listing else ()) if n.endswith(".pth"))
    added: list[str] = []
    for name in names[:1000]:
        text = _read_text(backend, os.path.join(site_dir, name), _MAX_PTH_BYTES)
        if text is None:
            continue
        for line in text.splitlines()[:10_000]:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                hooks.append(f"{name}: {line[:200]}")
                for word in line.replace(";", " ").split():
                    if word.startswith("__editable__") and word.endswith("_finder") and word.isidentifier():
                        editable.update(_editable_mapping(backend, os.path.join(site_dir, word + ".py")))
                continue
            path = os.path.normpath(os.path.join(site_dir, line))
            if path in entries:
                continue
            # An entry pointing outside the untrusted roots from a .pth the agent can write is kept (so a
            # module there is unknown rather than missing) without looking at whether it exists.
            if _inside(site_dir, untrusted, backend) and not _inside(path, untrusted, backend):
                entries.append(path)
            elif backend.stat_many([path], None)[0].kind == "dir":
                entries.append(path)
                added.append(path)
    return added


_MAPPINGS: dict[tuple[str, int, int], dict[str, str]] = {}


def _editable_mapping(backend: ProbeBackend, finder_path: str) -> dict[str, str]:
    """The MAPPING literal of a setuptools editable finder, cached by (path, mtime, size)."""
    state = backend.stat_many([finder_path], None)[0]
    key = (finder_path, state.mtime_ns, state.size)
    if key not in _MAPPINGS:
        if len(_MAPPINGS) > 1_000:
            _MAPPINGS.clear()
        unanswered = taints()
        mapping = _read_mapping(backend, finder_path) if state.kind == "file" else {}
        if taints() != unanswered:  # a probe went unanswered: not kept
            return mapping
        _MAPPINGS[key] = mapping
    return dict(_MAPPINGS[key])


def _read_mapping(backend: ProbeBackend, finder_path: str) -> dict[str, str]:
    """The MAPPING literal of a setuptools editable finder (name -> source path), read from its AST."""
    text = _read_text(backend, finder_path, _MAX_PTH_BYTES)
    if text is None:
        return {}
    try:
        tree = parse_python(text)
        for node in tree.body:
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in targets):
                mapping = ast.literal_eval(value)
                if isinstance(mapping, dict):
                    return {str(k): os.path.normpath(str(v)) for k, v in mapping.items()
                            if isinstance(v, str) and os.path.isabs(v)}
                return {}
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return {}
    return {}
