"""`guardrail bench gate-traj`: the gate's blocking precision on agent trajectories replayed in real workspaces.

Each project of the gate benchmark gets two constructed trajectories, one in SWE-agent's `.traj` layout (one
persistent shell: `cd` carries over) and one in mini-swe-agent's message layout (each ```bash block runs in
a fresh shell at the repository root). Their commands follow what the issue saw real agents do: explore,
grep, read files, write and run a reproduction script, import project names (some invented), run tests
after `pip install -q pytest &&`, append `|| true`, hand a directory to `grep`/`sed`, call `python3.13`.
The trajectories are written in their own file formats and read back the way those harnesses' files are
read. They are then replayed in a throwaway copy of the project: before each action the gate checks it
against the state the earlier actions left (intervene mode decides blocking), then the action runs and is
labelled by the error it raises. These trajectories are constructed, not recorded from a model: a mechanism
check of blocking precision on realistic sequences, not a published-agent figure.

Each command carries the pattern it stands for, and precision is reported per pattern too, among them the
three that cost precision on public trajectories: a tool right of ``||`` that never ran (``or-fallback``),
every shipped bundle's ``edit`` / ``insert`` forms (``aci-edit``: ACI lines, labelled by construction,
judged with no bundle given), and executables the agent's environment provides but the guard's PATH does
not (``agent-env``: checked by a gate that knows only the system PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table
from traces.bench.gate import _POSITIVE_ERRORS, PROJECTS, _mutations, _symbols, fetch_project, project_modules
from traces.bench.gate_more import HELD_OUT, prepare_tree, target_venv

__all__ = ["BENCH", "read_mini", "session", "tagged_session", "write_mini", "write_swe"]

_BASH_BLOCK = re.compile(r"```bash\n(.*?)\n```", re.S)
_CWD_MARK = "__GATE_TRAJ_CWD__"


def session(root: Path, project: str, python_version: tuple[int, int], *, seed: int = 0) -> list[str]:
    """One agent session on the project: the commands an agent issues, valid and hallucinated alike."""
    return [command for command, _ in tagged_session(root, project, python_version, seed=seed)]


# ACI lines in every form the shipped bundles define for `edit` and `insert`, valid ones and misuses (labels by
# construction: a valid form runs, a misuse is the harness's usage error). {line} is a line of the open file.
_ACI_FORMS = [
    ("edit {line}:{line}\nx = 1\nend_of_edit", False),  # windowed_edit_linting
    ("edit 'old text' 'new text'", False),  # windowed_edit_replace: search/replace
    ("edit 'old text' 'new text' True", False),
    ("insert 'import os'", False),
    ("insert 'import os' {line}", False),
    ("edit\nreplacement = 1\nend_of_edit", False),  # cursors: between the cursors
    ("insert 'import os' x{line}", True),  # a line number that is not one
    ("edit", True),  # no form takes nothing on its line and no body
    ("edit 'a' 'b' True extra", True),
]


def tagged_session(root: Path, project: str, python_version: tuple[int, int], *,
                   seed: int = 0) -> list[tuple[str, str]]:
    """`session` with the pattern each command stands for."""
    rng = random.Random(f"{seed}:traj:{project}")
    base, modules = project_modules(root)
    package_dir = next((p.parent for m, p in sorted(modules.items()) if p.name == "__init__.py"), base)
    rel_pkg = os.path.relpath(package_dir, root)
    rel_base = os.path.relpath(base, root)
    usable = [m for m in sorted(modules) if [n for n in _symbols(modules[m])[0] if not n.startswith("_")]]
    module = rng.choice(usable)
    names = sorted(n for n in _symbols(modules[module])[0] if not n.startswith("_"))
    name = rng.choice(names)
    fake = next((v for v in _mutations(name) if v not in names), name + "_x")
    source = os.path.relpath(modules[module], root)
    tests = [p for p in sorted(root.rglob("test_*.py")) if p.is_file()]
    test_rel = os.path.relpath(tests[0], root) if tests else None
    test_names = sorted(n for n in _symbols(tests[0])[0] if n.startswith("test")) if tests else []
    major, minor = python_version
    tagged: list[tuple[str, str]] = []
    commands = [
        "ls -la",
        f"find {shlex.quote(rel_pkg)} -name '*.py' | head -n 20",
        f"grep -n 'def ' {shlex.quote(rel_pkg)}",  # a directory without -r
        f"grep -rn 'def ' {shlex.quote(rel_pkg)} | head -n 5",
        f"cat {shlex.quote(source)} | head -n 20",
        "cat setup_notes.txt || true",
        f"sed -n '1,10p' {shlex.quote(source)}",
        f"sed -n '1,10p' {shlex.quote(rel_pkg)}",
        f"cd {shlex.quote(rel_base)}",
        f"python -c 'import {module}; print({module}.{name})'",
        f"python -c 'from {module} import {fake}'",
        f"cat > reproduce.py <<'EOF'\nfrom {module} import {name}\nimport re\nprint({name}, re.M)\nEOF",
        "python reproduce.py",
        "python -c 'import re, signal; print(re.S, signal.SIGTERM)'",
        f"python -c \"print(open('{rel_pkg}_settings.json').read())\"",
        "jq -r .name <<< '{\"name\": \"x\"}'",
        f"python{major}.{minor + 2} -c 'print(1)'",
        f"cd {shlex.quote(os.path.relpath(root, base))}" if rel_base != "." else "pwd",
        "ls no_such_dir 2>/dev/null || echo missing",
    ]
    if test_rel and test_names:
        real = rng.choice(test_names)
        collect = "python -m pytest --collect-only -q -p no:cacheprovider"
        commands += [f"pip install -q --no-index pytest && {collect} {test_rel}::{real}",
                     f"pip install -q --no-index pytest && {collect} {test_rel}::{real}_renamed"]
    tagged += [(command, "explore") for command in commands]
    # A tool right of `||` that never ran (the left side succeeds), as real runs write it.
    tagged += [(f"grep -n 'def ' {shlex.quote(source)} | head -n 3 || nosuchtool_zz --check", "or-fallback"),
               (f"cat {shlex.quote(source)} > /dev/null || rg_missing_zz -n def .", "or-fallback"),
               (f"ls {shlex.quote(rel_pkg)} > /dev/null || {{ echo no; nosuchtool_zz; }}", "or-fallback"),
               (f"test -d {shlex.quote(rel_pkg)} || nosuchtool_zz init", "or-fallback"),
               ("cat missing_notes_zz.txt || nosuchtool_zz", "or-fallback")]  # both fail: a real miss
    # Executables the agent's environment provides (the target venv's console scripts) but the guard's PATH lacks.
    tagged += [("pytest --version", "agent-env"), ("py.test --version", "agent-env"), ("pip --version", "agent-env"),
               ("pytset --version", "agent-env")]  # a typo: no environment provides it
    lines = len(source_lines(root / source))
    tagged += [(form.format(line=max(1, min(lines, 3))), "aci-edit:" + ("bad" if bad else "ok"))
               for form, bad in _ACI_FORMS]
    return tagged


def source_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


# ------------------------------------------------------------------------------------------------ file formats
def write_swe(commands: list[str], path: Path, sandbox_root: str = "/repo") -> None:
    """A SWE-agent 1.x `.traj` (v1 layout: each step's `state` is the state after it)."""
    steps = [{"action": command, "observation": "", "response": "", "thought": "", "execution_time": 0.0,
              "state": {"working_dir": sandbox_root, "open_file": "n/a"}, "query": [], "extra_info": {}}
             for command in commands]
    path.write_text(json.dumps({"environment": "main", "trajectory": steps, "history": [],
                                "info": {"exit_status": "submitted"}, "replay_config": "{}"}, indent=1))


def write_mini(commands: list[str], path: Path) -> None:
    """A mini-swe-agent trajectory: the assistant's messages each hold one ```bash block."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                      {"role": "user", "content": "Fix the issue."}]
    for command in commands:
        messages.append({"role": "assistant", "content": f"THOUGHT: next step.\n\n```bash\n{command}\n```"})
        messages.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"})
    path.write_text(json.dumps({"info": {"exit_status": "Submitted"}, "messages": messages,
                                "trajectory_format": "mini-swe-agent-1"}, indent=1))


def read_mini(path: Path) -> list[str]:
    """The commands of a mini-swe-agent trajectory, in order."""
    data = json.loads(path.read_text())
    out = []
    for message in data.get("messages", []):
        if message.get("role") == "assistant":
            blocks = _BASH_BLOCK.findall(str(message.get("content", "")))
            if len(blocks) == 1:
                out.append(blocks[0])
    return out


# ------------------------------------------------------------------------------------------------ replay
def replay(commands: list[str], root: Path, python: str, *, persistent: bool,
           patterns: dict[str, str] | None = None, open_file: str | None = None) -> list[dict[str, Any]]:
    """Check each command against the workspace the earlier ones left, then run it and label it (ACI lines are
    labelled by construction and not run; `agent-env` commands are checked by a gate that knows only the system
    PATH)."""
    from guardrail.gate.layer import EditorState, Gate, GateState

    env = {"PATH": os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"]),
           "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="gate-traj-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(root, copy, symlinks=True)
        env["HOME"] = tmp
        gate = Gate(copy, python=python, path_env=env["PATH"])
        system_only = Gate(copy, python=python, path_env="/usr/bin:/bin")  # the guard's PATH lacks the venv's
        state = GateState(cwd=str(copy))
        cwd = str(copy)
        for command in commands:
            pattern = (patterns or {}).get(command, "explore")
            if not persistent:
                state, cwd = GateState(cwd=str(copy)), str(copy)
            if pattern.startswith("aci-edit"):
                aci_state = GateState(cwd=cwd, editor=EditorState(str(copy / open_file) if open_file else None))
                report = gate.check({"kind": "swe_agent", "command": command}, aci_state)
                rows.append({"command": command, "pattern": pattern, "label": pattern.endswith(":bad"),
                             "warned": report.hallucinated, "blocked": report.blocking,
                             "latency_ms": report.latency_ms,
                             "violations": [v.predicate.label() for v in report.violations]})
                continue
            checker = system_only if pattern == "agent-env" else gate
            report = checker.check_and_advance({"kind": "shell", "command": command}, state)
            script = f"cd {shlex.quote(cwd)} || exit 97\n{command}\n__rc=$?\nprintf '\\n{_CWD_MARK}%s\\n' \"$(pwd)\"\n" \
                     "exit $__rc"
            proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300,
                                  errors="replace")
            marks = re.findall(rf"{_CWD_MARK}(.*)", proc.stdout)
            if persistent and marks:
                cwd = marks[-1].strip()
                state.cwd = cwd
            output = proc.stdout[-4000:] + proc.stderr[-4000:]
            label = proc.returncode != 0 and _POSITIVE_ERRORS.search(output) is not None
            if not label and proc.returncode == 0 and re.search(r"\|\|\s*(true|:)\s*$", command):
                label = _POSITIVE_ERRORS.search(proc.stderr[-4000:]) is not None
            rows.append({"command": command, "pattern": pattern, "label": label, "warned": report.hallucinated,
                         "blocked": report.blocking, "latency_ms": report.latency_ms,
                         "violations": [v.predicate.label() for v in report.violations]})
    return rows


def _ratio(numerator: int, denominator: int) -> float:
    return round(numerator / denominator, 4) if denominator else float("nan")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    blocked = [r for r in rows if r["blocked"]]
    warned = [r for r in rows if r["warned"]]
    positives = [r for r in rows if r["label"]]
    return {"actions": len(rows), "positives": len(positives),
            "blocking_precision": _ratio(sum(r["label"] for r in blocked), len(blocked)),
            "blocking_recall": _ratio(sum(r["blocked"] for r in positives), len(positives)),
            "warning_precision": _ratio(sum(r["label"] for r in warned), len(warned)),
            "warning_recall": _ratio(sum(r["warned"] for r in positives), len(positives)),
            "blocked": len(blocked), "warned": len(warned)}


# ------------------------------------------------------------------------------------------------ command
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per format and subset")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/guardrail/bench-gate"),
                        help="the gate benchmark's cache (sdists, target venv); trajectories are written under it")
    parser.add_argument("--python", default=None, help="the target interpreter (default: the bench venv)")
    parser.add_argument("--rows", action="store_true", help="also print every action and what the gate said")


def _run(args: argparse.Namespace) -> int:
    from adapters.swe_agent import read_traj
    from guardrail.gate.index import target_python

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    python = args.python or target_venv(cache)
    version = target_python(python).version
    folder = cache / "trajectories"
    folder.mkdir(exist_ok=True)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for spec in [*PROJECTS, *HELD_OUT]:
        root = fetch_project(spec, cache)
        prepare_tree(spec, root, python)
        tagged = tagged_session(root, spec, (version[0], version[1]))
        commands = [command for command, _ in tagged]
        patterns = dict(tagged)
        base, modules = project_modules(root)
        open_file = os.path.relpath(next(p for _, p in sorted(modules.items())), root)
        swe_file, mini_file = folder / f"{spec}.traj", folder / f"{spec}.mini.json"
        write_swe(commands, swe_file)
        write_mini(commands, mini_file)
        swe_commands = [step.action for step in read_traj(swe_file).steps]
        subset = "held_out" if spec in HELD_OUT else "development"
        for layout, recorded, persistent in (("swe-agent", swe_commands, True),
                                             ("mini-swe-agent", read_mini(mini_file), False)):
            rows = replay(recorded, root, python, persistent=persistent, patterns=patterns, open_file=open_file)
            results.setdefault((layout, subset), []).extend(dict(r, project=spec) for r in rows)
    out = [{"format": layout, "subset": subset, **summarize(rows)} for (layout, subset), rows in results.items()]
    everything = [r for rows in results.values() for r in rows]
    out.append({"format": "all", "subset": "all", **summarize(everything)})
    for pattern in sorted({r["pattern"].partition(":")[0] for r in everything}):
        chosen = [r for r in everything if r["pattern"].partition(":")[0] == pattern]
        out.append({"format": "all", "subset": f"pattern:{pattern}", **summarize(chosen)})
    if args.json:
        for row in out:
            emit_json(row)
        if args.rows:
            for row in everything:
                emit_json(row)
        return 0
    print_table(out)
    if args.rows:
        print_table([{k: str(v)[:70] for k, v in r.items()} for r in everything])
    return 0


BENCH = Command(help="gate blocking precision on SWE-agent and mini-swe-agent trajectories replayed in real workspaces",
                add_arguments=_add_arguments, run=_run)
