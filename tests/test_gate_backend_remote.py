"""The remote probe backend (issue 19): the fixed probe program gives exactly the local backend's answers.

Run here through `LocalExecTransport` (the probe program in a real subprocess, as a sandbox runs it;
the SWE-ReX transport has its own tests in test_adapters_swerex_backend.py). Asserted: every stat,
listing, read, walk and `which` equals `LocalBackend`'s on a hostile workspace; the gate's verdicts,
messages and hints are the same; no tripwire fires and nothing is written; paths are data, never shell;
the probe interpreter never runs from under the workspace; a warm decision costs one round-trip and sees
every change made since the last; a broken, lying, slow or silent sandbox makes predicates unknown,
never false, within the decision's deadline.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail.gate import Gate, Outcome
from guardrail.gate.backend import DECISION_MEMO, LocalBackend, Roots
from guardrail.gate.backend_remote import MAGIC, PROBE_SOURCE, LocalExecTransport, RemoteBackend
from guardrail.gate.interpreter import _QUERY
from tests.fuzzing import FUZZ
from tests.hostile.generators import HostileWorkspace, Sizes, build_workspace, hostile_actions, random_actions
from traces.bench.sandbox import report_signature

BUDGET_S = 10.0  # generous: these tests pin behaviour, not speed (that is `guardrail bench sandbox`)
SMALL = Sizes(big_module_bytes=60_000, chain_module_bytes=20_000, near_match_bytes=60_000, echo_pipes=300,
              dir_entries=3_000, nesting=500, dir_depth=20, random_actions=30)
FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
PATH_ENV = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])


class Recording(LocalExecTransport):
    """The probe run here, with every argv and environment it was given kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str] | None]] = []

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        self.calls.append((list(argv), env))
        return super().__call__(argv, timeout_s=timeout_s, env=env)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> HostileWorkspace:
    return build_workspace(tmp_path_factory.mktemp("remote"), SMALL)


def _paths(hw: HostileWorkspace) -> list[str]:
    ws = hw.ws
    found = [str(p) for p in sorted(ws.iterdir())]
    found += [str(p) for p in sorted((ws / "trap").iterdir())] + [str(ws / "tests" / "test_a.py")]
    return found + [
        str(ws), str(ws / "nope.py"), str(ws / "fifo.py" / "x"), str(ws / "loop_a" / "x"), str(ws / ("a" * 300)),
        str(ws / "keys_link" / "prod_key.pem"), str(ws / "keys_link"), str(ws / ".." / "outside" / ".env"),
        str(hw.outside / ".env"), str(hw.outside / "nope"), "/etc/passwd", "/dev/zero",
        str(ws / "bad\x00name"), str(ws / "d" / "d" / "nothing"), "relative/path.py", str(ws) + "/./trap/../trap",
    ]


def _roots(hw: HostileWorkspace) -> list[Roots | None]:
    workspace = Roots.of([hw.ws])
    stdlib = Roots.of([sysconfig.get_paths()["stdlib"]], trusted=True)
    return [workspace, workspace + stdlib, None]


def test_every_answer_is_the_local_backends(hostile: HostileWorkspace) -> None:
    local, remote = LocalBackend(), RemoteBackend(LocalExecTransport(), timeout_s=30.0)
    paths = _paths(hostile)
    for roots in _roots(hostile):
        for memo in (None, {}):  # alone, and inside a decision (one round-trip, answers kept)
            token = DECISION_MEMO.set(memo)
            try:
                assert remote.stat_many(paths, roots) == local.stat_many(paths, roots)
                for path in paths if memo is None else ():
                    for limit in (10, 100_000):
                        assert remote.list_dir(path, roots, limit) == local.list_dir(path, roots, limit), path
                    for limit in (7, 1 << 20):
                        assert remote.read_prefix(path, roots, limit) == local.read_prefix(path, roots, limit), path
                skip = frozenset({"bigdir"})
                assert remote.walk(str(hostile.ws), roots, 50, skip) == local.walk(str(hostile.ws), roots, 50, skip)
                dirs = ["/usr/local/bin", "/usr/bin", "/bin", str(hostile.ws)]
                for program in ("sh", "reproduce.py", "nosuchprogram_x", "fifo.py"):
                    assert remote.which(program, dirs, roots) == local.which(program, dirs, roots)
            finally:
                DECISION_MEMO.reset(token)
    assert remote.failures == 0


def test_the_gate_says_exactly_what_it_says_locally_and_runs_nothing(hostile: HostileWorkspace) -> None:
    before = hostile.snapshot()
    cases = hostile_actions(hostile) + random_actions(hostile, SMALL.random_actions, seed=19)
    same = {"budget_s": BUDGET_S, "python": sys.executable, "path_env": PATH_ENV}  # what the sandbox is told
    local = Gate(hostile.ws, **same)
    backend = RemoteBackend(LocalExecTransport(), timeout_s=30.0)
    remote = Gate(hostile.ws, backend=backend, **same)
    for case in cases:
        mine = report_signature(remote.check(case["action"]))
        theirs = report_signature(local.check(case["action"]))
        assert mine == theirs, case["action"]
    # the workspace's own interpreters: refused the same way (never run), with the same finding
    for python in hostile.evil_venvs.values():
        action = {"kind": "python", "code": "import trap"}
        there = Gate(hostile.ws, budget_s=BUDGET_S, python=str(python), path_env=PATH_ENV, backend=backend).check(action)
        here = Gate(hostile.ws, budget_s=BUDGET_S, python=str(python), path_env=PATH_ENV).check(action)
        assert report_signature(there) == report_signature(here)
        assert [f.message for f in there.findings(layer="gate")] == [f.message for f in here.findings(layer="gate")]
    assert sorted(p.name for p in hostile.markers.iterdir()) == []  # no tripwire fired
    assert hostile.snapshot() == before  # nothing written
    assert backend.failures == 0


def test_the_probe_runs_as_a_constant_program_with_its_request_as_data(tmp_path: Path) -> None:
    names = ["$(touch MARK_sub)", ";touch MARK_semi;", "`touch MARK_tick`", "a b\nc", "-rf", "it's \"q\".py",
             "\u00e9t\u00e9.py", "x\\y", "*", "--help"]
    for name in names:
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / os.fsdecode(b"latin\xe9.py")).write_text("y = 2\n")
    transport = Recording()
    backend = RemoteBackend(transport)
    paths = [str(tmp_path / name) for name in names] + [str(tmp_path / os.fsdecode(b"latin\xe9.py"))]
    assert [s.kind for s in backend.stat_many(paths, None)] == ["file"] * len(paths)
    assert backend.list_dir(str(tmp_path), None, 1000) == LocalBackend().list_dir(str(tmp_path), None, 1000)
    gate = Gate(tmp_path, budget_s=BUDGET_S, backend=backend)
    report = gate.check({"kind": "shell", "command": "cat " + " ".join(f"'{n}'" for n in names[:3]) + " missing"})
    assert [v.predicate.args[0] for v in report.violations] == [str(tmp_path / "missing")]
    assert not list(tmp_path.glob("MARK_*"))
    target = gate.index().target
    for argv, env in transport.calls:
        if argv[0].endswith("/find"):  # stats by argv: every path a start point, absolute, then fixed tokens
            assert argv[1] == "-P" and env == {"PATH": env["PATH"], "LC_ALL": "C"}
            cut = argv.index("-maxdepth")
            assert all(os.path.isabs(path) for path in argv[2:cut])
            assert all(not token.startswith("/") or token in argv[2:cut] or argv[i - 1] == "-path"
                       for i, token in enumerate(argv[cut:], cut) if token.startswith("/"))
            continue
        python, flags, program = argv[0], argv[1:5], argv[5]
        assert os.path.isabs(python) and flags == ["-I", "-S", "-B", "-c"]
        assert env is None or set(env) == {"PATH", "LC_ALL"}
        if program == _QUERY:  # the target's trusted base, asked its paths by the gate's fixed query
            assert python == target.base_executable and argv[6:] in ([], [target.venv, "nosystem"])
            continue
        assert program == PROBE_SOURCE or program == "import marshal,sys;exec(marshal.loads(bytes.fromhex(sys.argv.pop(1))))"
        data = argv[6:] if program == PROBE_SOURCE else argv[7:]
        assert data[0] == MAGIC and all(re.fullmatch(r"[0-9a-f]*", chunk) for chunk in data[1:])  # hex, nothing else


def test_the_probe_program_only_reads() -> None:
    """What the probe may do is visible in its source: built-in modules, no write, no process, no import of data."""
    tree = ast.parse(PROBE_SOURCE)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"errno", "marshal", "os", "stat", "sys", "time"}
    assert not any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))
    calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
    functions = {call.id for call in calls if isinstance(call, ast.Name)}
    methods = {call.attr for call in calls if isinstance(call, ast.Attribute)}
    assert not functions & {"open", "exec", "eval", "compile", "__import__"}
    assert not methods & {"system", "popen", "execv", "execve", "execvp", "spawnv", "posix_spawn", "fork", "remove",
                          "unlink", "rename", "replace", "mkdir", "makedirs", "rmdir", "chmod", "chown", "symlink",
                          "link", "truncate", "utime", "mkfifo"}
    opened = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "open"]
    assert opened and all("WRONLY" not in o and "RDWR" not in o and "CREAT" not in o for o in opened)
    writes = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "write"]
    assert writes and all(w.startswith(("os.write(1,", "os.write(2,")) for w in writes)  # stdout and stderr only


def test_the_workspace_interpreter_never_runs_the_probe(tmp_path: Path) -> None:
    ws, markers = tmp_path / "ws", tmp_path / "markers"
    (ws / "bin").mkdir(parents=True)
    markers.mkdir()
    trap = ws / "bin" / "python3"
    trap.write_text(f"#!/bin/sh\ntouch {markers / 'ran'}\nexec {sys.executable} \"$@\"\n")
    trap.chmod(0o755)
    backend = RemoteBackend(LocalExecTransport(), python=str(trap))
    report = Gate(ws, budget_s=BUDGET_S, backend=backend).check({"kind": "shell", "command": "cat nope.txt"})
    assert not list(markers.iterdir())
    assert not report.hallucinated and {r.outcome for r in report.results} == {Outcome.UNKNOWN}
    assert "never run" in (backend.last_failure or backend._discovery_error or "")
    with pytest.raises(ValueError, match="absolute"):
        RemoteBackend(LocalExecTransport(), python="python3")


def _warm_gate(backend: RemoteBackend, ws: Path) -> Gate:
    gate = Gate(ws, budget_s=BUDGET_S, backend=backend, python=sys.executable, path_env=PATH_ENV)
    assert gate.index() is not None
    return gate


def test_a_warm_decision_is_one_round_trip_and_sees_every_change(tmp_path: Path) -> None:
    import shutil

    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    backend = RemoteBackend(LocalExecTransport())
    gate, local = _warm_gate(backend, ws), Gate(ws, budget_s=BUDGET_S, python=sys.executable, path_env=PATH_ENV)

    def check(action: dict[str, Any]) -> tuple[Any, int]:
        before = backend.round_trips
        report = gate.check(action)
        assert report_signature(report) == report_signature(local.check(action)), action
        return report, backend.round_trips - before

    actions = [{"kind": "shell", "command": "cat setup.cfg fresh.txt && ls docs && python -c 'import freshmod'"},
               {"kind": "python", "code": "from pkg.core import make_engine, fresh_name"},
               {"kind": "shell", "command": "grep -rn x pkg && cat later/new.txt"}]
    for action in actions:
        check(action)  # cold: listings and files fetched once
    for action in actions:
        assert check(action)[1] == 1  # warm: one round-trip, whatever the action names
    # every kind of change since the last decision is seen in the next one
    (ws / "fresh.txt").write_text("new\n")
    (ws / "freshmod.py").write_text("x = 1\n")
    with open(ws / "pkg" / "core.py", "a", encoding="utf-8") as handle:
        handle.write("\nfresh_name = 1\n")
    (ws / "later").mkdir()
    (ws / "later" / "new.txt").write_text("x\n")
    for action in actions:
        assert not check(action)[0].hallucinated
    (ws / "setup.cfg").unlink()
    assert check(actions[0])[0].hallucinated


class Tampered(LocalExecTransport):
    """A sandbox whose interpreter starts lying once `armed` (the agent owns the sandbox, its interpreter too)."""

    def __init__(self, change: Any) -> None:
        self.change, self.armed = change, False

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        answer = super().__call__(argv, timeout_s=max(timeout_s, 5.0), env=env)
        if not self.armed or answer is None:
            return answer
        if argv[0].endswith("/find"):  # the sandbox's find lies the same way: its records are no longer find's
            code, stdout, stderr = answer
            answer = (code, re.sub(r"\d", "q", stdout) if stdout else "garbage", stderr)
            return answer if self.change is not _sleep else _sleep(answer, timeout_s)
        return self.change(answer, timeout_s)


def _sleep(answer: Any, timeout_s: float) -> Any:
    time.sleep(timeout_s + 0.05)
    return None


TAMPERING = {
    "garbage": lambda answer, _: (0, "GR1 [[not json", ""),
    "wrong count": lambda answer, _: (0, "GR1 []\n", ""),
    "wrong shapes": lambda answer, _: (0, re.sub(r'"[0-9a-f]*"', '"66"', answer[1]), ""),
    "unknown kinds": lambda answer, _: (0, re.sub(r'\["(6d697373696e67|66696c65|646972)"', '["7a7a"', answer[1]), ""),
    "bare integers": lambda answer, _: (0, re.sub(r"\[[^\[\]]*\]", "-1", answer[1]), ""),
    "exit 1": lambda answer, _: (1, "", "Traceback: boom"),
    "huge": lambda answer, _: (0, "GR1 [" + "0," * (9 << 20) + "0]", ""),
    "deeply nested": lambda answer, _: (0, "GR1 " + "[" * 200_000 + "]" * 200_000, ""),
    "silent": _sleep,
}


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_a_lying_or_silent_sandbox_makes_predicates_unknown_never_false(tmp_path: Path, name: str) -> None:
    import shutil

    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    transport = Tampered(TAMPERING[name])
    backend = RemoteBackend(transport, timeout_s=0.3)
    gate = Gate(ws, budget_s=1.0, backend=backend, python=sys.executable)
    assert gate.index() is not None
    actions = [{"kind": "shell", "command": "cat nope.txt && nosuchcommand_q && python -c 'import nosuchmod_q'"},
               {"kind": "python", "code": "from pkg.core import nope_name\nimport pkg.nosub"},
               {"kind": "tool", "tool": "str_replace_editor",
                "args": {"command": "str_replace", "path": str(ws / "setup.cfg"), "old_str": "zzz", "new_str": ""}}]
    for action in actions:  # honest answers first: caches filled, as in a run that has gone on a while
        gate.check(action)
    transport.armed = True
    for action in actions:
        started = time.perf_counter()
        report = gate.check(action)
        assert time.perf_counter() - started < 2.0
        assert not any(r.outcome is Outcome.FALSE for r in report.results), (name, report.to_json())
        assert report.error is None and any(r.outcome is Outcome.UNKNOWN for r in report.results)


def _gnu_find() -> bool:
    """Whether the backend would find a GNU find here: the same places and the same question it asks."""
    for candidate in ("/usr/bin/find", "/bin/find"):
        try:
            answer = subprocess.run([candidate, "-P", "/", "-maxdepth", "0", "-printf", "%y"], capture_output=True,
                                    text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if answer.returncode == 0 and answer.stdout == "d":
            return True
    return False


def _require_gnu_find() -> None:
    if not _gnu_find():
        pytest.skip("this machine has no GNU find at /usr/bin/find or /bin/find, the only places the backend looks "
                    "(the fast path reads GNU find's -printf records; without it every batch goes to the probe "
                    "program, which the other tests here cover). To run this test: apt-get install findutils")


def test_stats_are_answered_by_find_without_an_interpreter_and_agree(tmp_path: Path) -> None:
    """Issue 30: a warm decision's stats and small listings come from one GNU find by argv; what it cannot settle (a
    symlink met in the workspace, content to read) goes to the probe program, and the answers are the same."""
    import shutil

    _require_gnu_find()
    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    (ws / "escape").symlink_to("/etc")
    fast, slow = RemoteBackend(LocalExecTransport()), RemoteBackend(LocalExecTransport(), coreutils=False)
    gates = [_warm_gate(backend, ws) for backend in (fast, slow)]
    actions = [{"kind": "shell", "command": "cat setup.cfg nope.txt && ls docs && python -c 'import pkg.core'"},
               {"kind": "shell", "command": "cat escape/hostname escape/nothing_q && cd nodir"},
               {"kind": "python", "code": "from pkg.core import make_engine, nope_name"}]
    for _ in range(2):
        for action in actions:
            assert report_signature(gates[0].check(action)) == report_signature(gates[1].check(action)), action
    assert slow.fast_round_trips == 0
    plain = RemoteBackend(LocalExecTransport())  # a gate that never met the symlink: its warm decisions are all find
    gate = _warm_gate(plain, ws)
    for action in (actions[0], actions[2], actions[0]):
        gate.check(action)
    before = (plain.round_trips, plain.fast_round_trips)
    gate.check(actions[0])
    assert (plain.round_trips - before[0], plain.fast_round_trips - before[1]) == (1, 1)  # one find, no interpreter


def test_a_find_run_is_used_only_when_every_start_point_is_accounted_for(tmp_path: Path) -> None:
    """A start point with neither a record nor a "missing" line (a transport that cut stderr, an error of another
    kind) voids the whole run: a lost line never reads as "missing"."""
    from guardrail.gate.coreutils_probe import FindRecords, plan

    _require_gnu_find()
    (tmp_path / "it's here").write_text("x")
    (tmp_path / "file").write_text("x")
    named = [str(tmp_path / "it's here"), str(tmp_path / "it's gone"), str(tmp_path / "file") + "/x",
             *(str(tmp_path / f"missing-{n:03d}") for n in range(60))]
    find = next(c for c in ("/usr/bin/find", "/bin/find") if os.path.exists(c))
    planned = plan(find, [("s", path) for path in named], [])
    assert planned is not None
    starts = planned.starts
    ran = subprocess.run(planned.argv, capture_output=True, text=True, env={"LC_ALL": "C"}, timeout=30)
    whole = FindRecords(ran.stdout, ran.stderr, starts)
    assert whole.valid and whole.missing | whole.not_dir == set(starts) - set(whole.stats) and len(whole.missing) > 60
    assert str(tmp_path / "it's gone") in whole.missing and str(tmp_path / "it's here") in whole.stats
    assert whole.not_dir == {str(tmp_path / "file") + "/x"}  # ENOTDIR, told apart from ENOENT
    assert len(ran.stderr) > 2000  # the SWE-ReX transport used to keep the last 2,000 characters only
    for cut in (ran.stderr[-2000:], ran.stderr[ran.stderr.index("\n", 1000) + 1:], ""):
        assert not FindRecords(ran.stdout, cut, starts).valid
    assert not FindRecords(ran.stdout, ran.stderr + f"{find}: '{starts[0]}': Permission denied\n", starts).valid


class _CutStderr(LocalExecTransport):
    """A transport that keeps the last 200 characters of stderr, starting at a line (as a careless sandbox API might)."""

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        outcome = super().__call__(argv, timeout_s=timeout_s, env=env)
        if outcome is None or len(outcome[2]) <= 200:
            return outcome
        tail = outcome[2][-200:]
        return outcome[0], outcome[1], tail[tail.find("\n") + 1:]


def test_many_missing_programs_are_one_find_and_a_cut_stderr_costs_a_round_trip_not_an_answer(tmp_path: Path) -> None:
    """A warm decision that looks up many programs missing from every PATH directory (kilobytes of "No such file"
    lines) is still one find; through a transport that cuts stderr it falls back to the probe program and says
    what the local gate says."""
    import shutil

    _require_gnu_find()
    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    action = {"kind": "shell", "command": " && ".join(f"zz-no-such-tool-{n} --version" for n in range(12))}
    local = Gate(ws, budget_s=BUDGET_S, python=sys.executable, path_env=PATH_ENV)
    for transport in (LocalExecTransport(), _CutStderr()):
        backend = RemoteBackend(transport)
        gate = _warm_gate(backend, ws)
        for _ in range(2):
            assert report_signature(gate.check(action)) == report_signature(local.check(action))
        before = (backend.round_trips, backend.fast_round_trips)
        assert report_signature(gate.check(action)) == report_signature(local.check(action))
        trips = (backend.round_trips - before[0], backend.fast_round_trips - before[1])
        assert trips == ((1, 1) if type(transport) is LocalExecTransport else (2, 1)), trips


def test_a_symlinked_directory_costs_one_interpreter_round_trip_then_finds_alone(tmp_path: Path) -> None:
    """A PATH directory that is a symlink (merged-usr's /bin) needs where it leads, which only the probe program
    said at first; the first find shows it is a link, and from then on a warm decision asks find alone."""
    import shutil

    _require_gnu_find()
    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    real = tmp_path / "tools-real"
    real.mkdir()
    (real / "mytool").write_text("#!/bin/sh\n")
    (real / "mytool").chmod(0o755)
    (tmp_path / "tools").symlink_to(real)
    path_env = os.pathsep.join([str(tmp_path / "tools"), PATH_ENV])
    fast, slow = RemoteBackend(LocalExecTransport()), RemoteBackend(LocalExecTransport(), coreutils=False)
    gates = [Gate(ws, budget_s=BUDGET_S, backend=b, python=sys.executable, path_env=path_env) for b in (fast, slow)]
    local = Gate(ws, budget_s=BUDGET_S, python=sys.executable, path_env=path_env)
    action = {"kind": "shell", "command": "mytool --x && nothere_zz --y && cat setup.cfg"}
    for _ in range(3):
        expected = report_signature(local.check(action))
        assert [report_signature(g.check(action)) for g in gates] == [expected, expected]
    assert str(tmp_path / "tools") in fast._dir_links
    before = (fast.round_trips, fast.fast_round_trips)
    assert report_signature(gates[0].check(action)) == report_signature(local.check(action))
    assert (fast.round_trips - before[0], fast.fast_round_trips - before[1]) == (1, 1)


def _with_big_package(tmp_path: Path, padded: tuple[int, ...] = ()) -> Path:
    """The fixture workspace with `bigpkg`: an `__init__` importing a name from each of its 12 modules (those in
    `padded` over 256 KiB)."""
    import shutil

    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    big = ws / "bigpkg"
    big.mkdir()
    (big / "__init__.py").write_text("".join(f"from .m{n} import name{n}\n" for n in range(12)))
    for n in range(12):
        (big / f"m{n}.py").write_text(f"import os\nname{n} = {n}\n" + ("# padding\n" * 30_000 if n in padded else ""))
    return ws


def test_a_package_whose_import_loads_many_modules_reads_them_together(tmp_path: Path) -> None:
    """`python -m pkg.missing` follows what importing pkg loads: through a sandbox, its modules' sources are read in a
    few round-trips (a batch per module whose imports name them), not one each, and the answer is the local one."""
    ws = _with_big_package(tmp_path)
    recording = Recording()
    backend = RemoteBackend(recording, coreutils=False)  # every round-trip is the probe program: countable
    gate = _warm_gate(backend, ws)
    local = Gate(ws, budget_s=BUDGET_S, python=sys.executable, path_env=PATH_ENV)
    action = {"kind": "shell", "command": "python -m bigpkg.cli_main --help"}
    before = backend.round_trips
    report = gate.check(action)
    assert report_signature(report) == report_signature(local.check(action))
    assert report.hallucinated  # bigpkg has no cli_main
    assert backend.round_trips - before <= 9  # 8 here; 19 when each module was read in a round-trip of its own


_WIRE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10 ** 20, 10 ** 20) | st.text() | st.binary(max_size=40)
    | st.tuples(st.sampled_from(["file", "dir", "missing", "other", "loop", "odd"]), st.integers(0, 10 ** 19),
                st.integers(0, 10 ** 12), st.booleans(), st.sampled_from(["", "a parent is a file, not a directory"])),
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner), max_leaves=30)


@given(_WIRE_VALUES)
@FUZZ
def test_find_answers_take_the_form_the_probe_programs_json_gives(value: Any) -> None:
    """The fast path builds its answers' wire form directly; it must be what the probe program's JSON decodes to."""
    import json

    from guardrail.gate.coreutils_probe import wire
    from guardrail.gate.remote_probe import _encode

    encoded: list[str] = []
    _encode(value, encoded)
    assert wire(value) == json.loads("".join(encoded))


class LyingOnBatchedReads(Tampered):
    """Honest, except on a request that reads several files at once (the closure's read-ahead: their stats with
    content, then any reads left): that one lies."""

    lied = 0

    def __call__(self, argv: list[str], *, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        import marshal

        self.armed = False
        if MAGIC in argv:
            request = marshal.loads(bytes.fromhex("".join(argv[argv.index(MAGIC) + 1:])))
            self.armed = sum(1 for operation in request[3] if operation[0] in ("r", "sr")) > 1
            self.lied += self.armed
        return super().__call__(argv, timeout_s=timeout_s, env=env)


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_a_lying_sandbox_during_the_closures_read_ahead_makes_it_unknown_never_false(tmp_path: Path,
                                                                                      name: str) -> None:
    """The batched reads of a package's modules (`FsView.read_ahead`: stats with content, then `read_many`) get
    garbage, wrong shapes, huge or nested answers or none: every predicate says what the local gate says or is
    unknown (each read is asked again, honestly here), and the decision ends in bounded time."""
    # two modules over the 256 KiB a stat brings along: `read_many` reads those itself
    ws = _with_big_package(tmp_path, padded=(0, 1))
    transport = LyingOnBatchedReads(TAMPERING[name])
    gate = Gate(ws, budget_s=1.0, backend=RemoteBackend(transport, timeout_s=0.3), python=sys.executable)
    local = Gate(ws, budget_s=10.0, python=sys.executable)
    assert gate.index() is not None
    action = {"kind": "shell", "command": "python -m bigpkg.cli_main --help"}
    started = time.perf_counter()
    report = gate.check(action)
    assert time.perf_counter() - started < 2.5 and transport.lied >= 1
    assert report.error is None
    truth = {(r.predicate.name, tuple(map(str, r.predicate.args))): r.outcome for r in local.check(action).results}
    for result in report.results:  # each answer is the local one, or unknown: a lie never becomes an answer
        assert result.outcome in (truth.get((result.predicate.name, tuple(map(str, result.predicate.args)))),
                                  Outcome.UNKNOWN), (name, result)
