"""Generators of hostile workspaces and actions for the gate: tripwires, planted secrets, devices, pathological sizes.

A `HostileWorkspace` is a workspace an attacker (or a prompt injected into the agent) could have
prepared, next to an `outside` directory holding fake secrets the gate must never reveal. Every
tripwire writes a file into `markers` when executed, so "nothing ran" is a directory listing.
`Sizes` sets how pathological it is: small in `make test`, large under `make fuzz`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["HostileWorkspace", "Sizes", "build_workspace", "hostile_actions", "random_actions", "tripwire",
           "write_spec"]


@dataclass(frozen=True)
class Sizes:
    big_module_bytes: int = 2_000_000  # the 2 MB module (rejected by the parse cap before parsing)
    chain_module_bytes: int = 400_000  # four star-chained modules just under the parse cap
    near_match_bytes: int = 1_900_000  # the file a str_replace near-match searches
    echo_pipes: int = 49_000  # `echo $(a|a|...)`: 98 KB
    dir_entries: int = 20_000  # a directory beside a missing path
    nesting: int = 500  # subscripts nested in a helper module
    dir_depth: int = 60
    random_actions: int = 40

    @classmethod
    def large(cls) -> Sizes:
        return cls(big_module_bytes=8_000_000, chain_module_bytes=500_000, near_match_bytes=2_000_000,
                   echo_pipes=49_000, dir_entries=150_000, nesting=2_000, dir_depth=200, random_actions=400)


def tripwire(marker: Path) -> str:
    """Python source that leaves `marker` behind if it is ever executed (posix only: works even while the
    interpreter is still initialising its codecs, when `open` does not exist yet)."""
    return (f"import posix; posix.close(posix.open({str(marker)!r}, posix.O_CREAT | posix.O_WRONLY, 0o644))\n")


@dataclass
class HostileWorkspace:
    root: Path
    ws: Path
    outside: Path
    markers: Path
    secrets: list[str]  # strings that must never appear in anything the gate reports
    evil_venvs: dict[str, Path] = field(default_factory=dict)  # name -> the venv's bin/python
    sizes: Sizes = field(default_factory=Sizes)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Every path under the workspace with its size and mtime (the gate must change none of them)."""
        out: dict[str, tuple[int, int]] = {}
        for dirpath, dirnames, filenames in os.walk(self.ws):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                out[os.path.relpath(path, self.ws)] = (st.st_size, st.st_mtime_ns)
        return out


def _token(rng: random.Random, prefix: str) -> str:
    return f"{prefix}{rng.getrandbits(64):016x}"


def _dense_module(size: int, extra: str = "") -> str:
    """Valid Python of about `size` bytes with as many AST nodes per byte as plain code gets."""
    items = max(1, (size - len(extra)) // 8)
    return extra + "x = [" + ",".join(["a[b[c]]"] * items) + "]\n"


def _evil_home(ws: Path, markers: Path) -> Path:
    """A venv whose home is inside the workspace: a real interpreter binary beside a stdlib whose
    `encodings` package is a tripwire (what that interpreter loads first, before any flag is read)."""
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    real_binary = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    home = ws / "evilhome"
    (home / "bin").mkdir(parents=True)
    shutil.copy2(real_binary, home / "bin" / version)
    stdlib = home / "lib" / version
    stdlib.mkdir(parents=True)
    shutil.copytree(Path(sysconfig.get_paths()["stdlib"]) / "encodings", stdlib / "encodings",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(base / "lib" / version / "os.py", stdlib / "os.py")  # the landmark that makes it a prefix
    with open(stdlib / "encodings" / "__init__.py", "a", encoding="utf-8") as handle:
        handle.write(tripwire(markers / "evil_home_encodings"))
    venv = ws / "venv_home_inside"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {home / 'bin'}\nversion = {sys.version.split()[0]}\n"
                                     f"executable = {home / 'bin' / version}\n")
    os.symlink(home / "bin" / version, venv / "bin" / "python")
    return venv / "bin" / "python"


def _script_python(ws: Path, markers: Path) -> Path:
    """A `.venv/bin/python` that is a shell script (and a venv whose cfg names it as its base)."""
    venv = ws / ".venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "python"
    script.write_text(f"#!/bin/sh\ntouch {markers / 'script_python'}\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    cfg_venv = ws / "venv_script_base"
    (cfg_venv / "bin").mkdir(parents=True)
    (cfg_venv / "pyvenv.cfg").write_text(f"home = {venv / 'bin'}\nexecutable = {script}\n")
    os.symlink(script, cfg_venv / "bin" / "python")
    return script


def build_workspace(root: Path, sizes: Sizes = Sizes(), *, seed: int = 15) -> HostileWorkspace:
    """A hostile workspace under `root`/ws and fake secrets under `root`/outside."""
    rng = random.Random(seed)
    ws, outside, markers = root / "ws", root / "outside", root / "markers"
    for directory in (ws, outside, markers):
        directory.mkdir(parents=True)
    secrets = [_token(rng, "DBPW_"), _token(rng, "PEMKEY_"), _token(rng, "siblingname_"), _token(rng, "secretmod_"),
               _token(rng, "TOKENNAME_"), _token(rng, "shadowline_")]
    db_password, pem, sibling, secret_module, secret_name, shadow = secrets
    # ---- secrets outside the workspace, and ways to reach them from inside
    (outside / ".env").write_text(f"DB_PASSWORD={db_password}\nAPI_URL=https://example.invalid\n")
    (outside / "keys").mkdir()
    (outside / "keys" / "prod_key.pem").write_text(f"-----BEGIN PRIVATE KEY-----\n{pem}\n-----END PRIVATE KEY-----\n")
    (outside / "keys" / f"{sibling}.pem").write_text("x\n")
    (outside / "pylib").mkdir()
    (outside / "pylib" / f"{secret_module}.py").write_text(f"{secret_name} = 1\n")
    (outside / "shadow").write_text(f"root:{shadow}:19000:0:99999:7:::\n")
    (outside / "script.py").write_text(f"from {secret_module} import {secret_name}\nimport {secret_module}_x\n")
    os.symlink(outside / "keys", ws / "keys_link")
    os.symlink(outside / ".env", ws / "env_link")
    os.symlink(outside / "pylib", ws / "pylib_link")
    # ---- tripwires: code the gate must never run
    (ws / "trap").mkdir()
    (ws / "trap" / "__init__.py").write_text(tripwire(markers / "trap_init") + "Thing = 1\n")
    (ws / "conftest.py").write_text(tripwire(markers / "conftest"))
    (ws / "sitecustomize.py").write_text(tripwire(markers / "sitecustomize"))
    (ws / "usercustomize.py").write_text(tripwire(markers / "usercustomize"))
    (ws / "evil.pth").write_text(f"import posix; posix.open({str(markers / 'pth')!r}, posix.O_CREAT)\n")
    (ws / "reproduce.py").write_text(tripwire(markers / "reproduce") + "from trap import Thing, Other\n")
    (ws / "tests").mkdir()
    (ws / "tests" / "test_a.py").write_text(tripwire(markers / "test_module") + "def test_a():\n    pass\n")
    evil_venvs = {"home_inside": _evil_home(ws, markers), "script": _script_python(ws, markers)}
    # ---- devices, FIFOs, loops
    os.mkfifo(ws / "fifo.py")
    os.mkfifo(ws / "pipe")
    os.symlink("/dev/zero", ws / "zero.py")
    os.symlink("/dev/zero", ws / "zero.txt")
    os.symlink(ws / "loop_b", ws / "loop_a")
    os.symlink(ws / "loop_a", ws / "loop_b")
    # ---- pathological sizes and depths
    (ws / "bigmod.py").write_text(_dense_module(sizes.big_module_bytes))
    for i in range(4):
        star = f"from chain{i + 1} import *\n" if i < 3 else ""
        (ws / f"chain{i}.py").write_text(_dense_module(sizes.chain_module_bytes, star))
    lines = max(1, sizes.near_match_bytes // 32)
    (ws / "big.txt").write_text("".join(f"line number {i:07d} of the file\n" for i in range(lines)))
    (ws / "oneline.txt").write_text("y" * sizes.near_match_bytes)
    (ws / "bigdir").mkdir()
    for i in range(sizes.dir_entries):
        (ws / "bigdir" / f"entry_{i:06d}.txt").touch()
    deep = ws
    for _ in range(sizes.dir_depth):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (ws / "deephelper.py").write_text("import sys\nx = 1\nsys.modules" + "[0]" * sizes.nesting + " = 1\n")
    (ws / "deepexpr.py").write_text("y = " + "-" * sizes.nesting * 4 + "1\n" + "z = " + "(" * 150 + ")" * 150 + "\n")
    return HostileWorkspace(root, ws, outside, markers, secrets, evil_venvs, sizes)


def hostile_actions(hw: HostileWorkspace) -> list[dict[str, Any]]:
    """Fixed actions aimed at each hostile part (`expect` names what the test checks beyond the common rules)."""
    ws, outside, sizes = hw.ws, hw.outside, hw.sizes
    editor = "str_replace_editor"

    def shell(command: str, **extra: Any) -> dict[str, Any]:
        return {"action": {"kind": "shell", "command": command}, **extra}

    def python(code: str, **extra: Any) -> dict[str, Any]:
        return {"action": {"kind": "python", "code": code}, **extra}

    def tool(args: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"action": {"kind": "tool", "tool": editor, "args": args}, **extra}

    def aci(command: str, open_file: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"action": {"kind": "swe_agent", "command": command}, "open_file": open_file, **extra}

    return [
        # secrets outside the workspace, directly and through symlinks
        tool({"command": "str_replace", "path": str(outside / ".env"), "old_str": "DB_PASSWORD=?", "new_str": ""},
             expect="unknown"),
        tool({"command": "str_replace", "path": str(ws / "env_link"), "old_str": "DB_PASSWORD=?", "new_str": ""},
             expect="unknown"),
        tool({"command": "str_replace", "path": str(outside / "shadow"), "old_str": "root:?", "new_str": ""}),
        tool({"command": "view", "path": str(outside / "keys" / "prod_ky.pem")}, expect="unknown"),
        tool({"command": "view", "path": "/etc/shadow", "view_range": [1, 3]}),
        shell(f"cat {outside}/keys/prod_ky.pem", expect="unknown"),
        shell("cat keys_link/prod_ky.pem && ls keys_link/nothing", expect="unknown"),
        shell(f"PYTHONPATH={outside}/pylib python -c 'import secretmod_nope'", expect="unknown"),
        shell("PYTHONPATH=pylib_link python -c 'import secretmod_nope'", expect="unknown"),
        shell(f"python {outside}/script.py"),
        shell(f"cd {outside} && cat missing.txt"),
        shell(f"pytest {outside}/script.py::test_x"),
        aci(f"open {outside}/.env 999"),
        aci("goto 999999", open_file=str(outside / ".env")),
        python(f"open({str(outside / 'keys' / 'prod_ky.pem')!r}).read()"),
        # tripwires: code the gate reads but must never run
        python("import trap\nfrom trap import Thing, Missing", expect="block"),
        shell("python reproduce.py && python -m pytest tests/test_a.py::test_b"),
        shell("python - <<'EOF'\nimport trap\nEOF"),
        # devices, FIFOs, symlink loops
        shell("cat fifo.py pipe zero.txt && python fifo.py && python zero.py"),
        python("from fifo import x\nfrom zero import y"),
        aci("open zero.txt 5"),
        tool({"command": "str_replace", "path": str(ws / "zero.txt"), "old_str": "x", "new_str": ""}),
        shell("cat loop_a; cd loop_b"),
        # pathological sizes and depths
        python("from bigmod import nope"),
        python("from chain0 import nope"),
        shell("echo $(" + "|".join(["a"] * sizes.echo_pipes) + ")"),
        tool({"command": "str_replace", "path": str(ws / "big.txt"),
              "old_str": "line number 0012345 of teh file", "new_str": ""}, expect="block"),
        tool({"command": "str_replace", "path": str(ws / "oneline.txt"), "old_str": "y" * 50 + "z", "new_str": ""}),
        aci("open oneline.txt 3"),
        shell("cat bigdir/entry_99999999.txt", expect="latency"),
        shell("ls " + "d/" * sizes.dir_depth + "nothing.txt"),
        python("from deephelper import x\nimport nosuchmodule_hostile", expect="block"),
        python("from deepexpr import y\nimport nosuchmodule_hostile2", expect="block"),
        aci("goto " + "9" * 5000, open_file=str(ws / "big.txt"), expect="block"),
        aci("open big.txt " + "0" * 4000 + "7" * 4400),
        aci("edit " + "1" * 5000 + ":" + "2" * 5000, open_file=str(ws / "big.txt")),
        shell("case $1 in start) echo a;; stop) echo b;; esac; greet() { echo hi; }; greet", expect="allow"),
        python("x = " + "[" * 5000 + "]" * 5000),
        shell("cat a " * 20_000),
    ]


_PATH_WORDS = ["bigdir/entry_000001.txt", "keys_link/prod_key.pem", "env_link", "zero.txt", "fifo.py", "loop_a",
               "pylib_link", "big.txt", "nothing/here", "../outside/.env", "/etc/passwd", "/proc/self/environ",
               "/dev/zero", "~/.ssh/id_rsa"]
_MODULES = ["trap", "bigmod", "chain0", "deephelper", "fifo", "zero", "nosuch_hostile", "os.path", "trap.Thing"]
_SHELL_TEMPLATES = ["cat {p}", "ls {p}", "cd {p} && ls", "python {p}", "python -c 'import {m}'", "grep x {p}",
                    "head -n 3 {p} | wc -l", "PYTHONPATH={p} python -c 'from {m} import q'", "pytest {p}::test_a",
                    "bash -c \"cat {p}\"", "echo $(cat {p})", "for f in {p}; do cat $f; done", "{p}"]


def random_actions(hw: HostileWorkspace, count: int, *, seed: int) -> list[dict[str, Any]]:
    """`count` actions composed from hostile paths, module names and templates (deterministic for a seed)."""
    rng = random.Random(seed)
    paths = _PATH_WORDS + [str(hw.outside / name) for name in (".env", "keys", "pylib", "script.py", "nope")]
    out: list[dict[str, Any]] = []
    for _ in range(count):
        p, m = rng.choice(paths), rng.choice(_MODULES)
        roll = rng.random()
        if roll < 0.5:
            command = " && ".join(rng.choice(_SHELL_TEMPLATES).format(p=p, m=m) for _ in range(rng.randint(1, 3)))
            out.append({"action": {"kind": "shell", "command": command}})
        elif roll < 0.7:
            out.append({"action": {"kind": "python", "code": f"from {m} import {rng.choice(['x', 'Thing', 'nope'])}\n"
                                                             f"open({p!r}).read()"}})
        elif roll < 0.9:
            path = p if p.startswith("/") else str(hw.ws / p)
            command = rng.choice(["view", "str_replace", "insert", "create"])
            args: dict[str, Any] = {"command": command, "path": path, "old_str": "DB_PASSWORD=", "new_str": "",
                                    "insert_line": rng.choice([1, 10**6]), "file_text": ""}
            out.append({"action": {"kind": "tool", "tool": "str_replace_editor", "args": args}})
        else:
            out.append({"action": {"kind": "swe_agent", "command": f"open {p} {rng.randint(1, 10**9)}"},
                        "open_file": str(hw.ws / rng.choice(["big.txt", "zero.txt", "fifo.py"]))})
    return out


def write_spec(path: Path, hw: HostileWorkspace, cases: list[dict[str, Any]], *, python: str | None,
               memory_bytes: int, budget_s: float) -> None:
    """The runner's input: the workspace, the interpreter, the limits and the cases."""
    path.write_text(json.dumps({"workspace": str(hw.ws), "python": python, "memory_bytes": memory_bytes,
                                "budget_s": budget_s, "cases": cases}))
