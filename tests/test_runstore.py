"""The run store: what the Guard records, on every backend, and how it survives a slow, failing or killed writer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from guardrail import Action, Guard, Result, Step, StepKind, ToolEvent
from guardrail.core.corpus import iter_corpus, read_corpus
from guardrail.core.layer import Layer
from guardrail.core.runstore import RunRecorder, RunStore, open_store
from guardrail.core.runstore.directory import DirectoryStore

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Nagging(Layer):
    """A layer of the user's: a warning on every step whose text says "loop"."""

    name = "nagging"

    def on_step(self, ctx: Any, step: Step) -> Any:
        if "loop" in step.text:
            from guardrail import Finding

            return [Finding(layer=self.name, check="looping", message="the run repeats itself", step=step.index)]
        return None


def tool_step(index: int, city: str, result: str) -> Step:
    return Step(index=index, kind=StepKind.TOOL_CALL, text=f"[lookup({{\"city\": \"{city}\"}}) -> {result}]",
                tool_events=[ToolEvent(id=f"c{index}", name="lookup", args={"city": city}, result=result)])


def one_run(guard: Guard, city: str, *, loop: bool = False, bad_call: bool = False) -> str:
    ctx = guard.start_episode(task=f"weather in {city}", framework="mine", tool_schemas={"lookup": SCHEMA})
    action = Action.tool_call("lookup", {"town": city} if bad_call else {"city": city}, call_id="c0")
    decision = ctx.before_action(action)
    if decision.allowed:
        ctx.after_result(action, Result(output=f"{city}: 280 K", call_id="c0"))
    ctx.on_step(tool_step(0, city, f"{city}: 280 K"))
    if loop:
        ctx.on_step(Step(index=1, kind=StepKind.TEXT, text="loop again"))
    return ctx.finish(answer=f"{city} is at 280 K").episode_id  # type: ignore[no-any-return]


@pytest.fixture(params=["directory", "sqlite", "postgres"])
def store_url(request, tmp_path) -> str:
    if request.param == "directory":
        return str(tmp_path / "runs")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/runs.db"
    return _postgres_store(request.getfixturevalue("postgres_dsn"))


def _postgres_store(dsn: str) -> str:
    """A store URL on the test server, in a schema of its own (each test starts empty)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'guardrail[scale]')")
    import psycopg

    schema = f"s{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}options=-csearch_path%3D{schema}"


def test_every_backend_records_steps_findings_labels_and_versions(store_url):
    guard = Guard.default(record=store_url, extra_layers=[Nagging()], mode="intervene")
    clean = one_run(guard, "Oslo")
    looping = one_run(guard, "Lima", loop=True)
    blocked = one_run(guard, "Quito", bad_call=True)
    guard.label(looping, "failed")
    guard.close()

    with open_store(store_url, create=False) as store:
        summaries = {s.episode_id: s for s in store.summaries()}
        episodes = {e.episode_id: e for e in store.episodes()}
    assert list(summaries) == [clean, looping, blocked]  # oldest first
    assert {s.label for s in summaries.values()} == {"unlabelled", "failed"}
    assert summaries[looping].label == "failed"
    assert [(f.layer, f.check, f.severity, f.step) for f in summaries[looping].findings] == [
        ("nagging", "looping", "warning", 1)]
    assert [(f.layer, f.check) for f in summaries[blocked].findings] == [("gate", "malformed_call")]
    assert summaries[clean].findings == [] and summaries[clean].status == "complete"
    assert [s.text for s in episodes[clean].steps] == ['[lookup({"city": "Oslo"}) -> Oslo: 280 K]', "Oslo is at 280 K"]
    assert episodes[clean].framework == "mine" and episodes[clean].task == "weather in Oslo"
    assert episodes[clean].tools == ["lookup"]
    run = episodes[blocked].meta["run"]
    assert [(d["hook"], d["verdict"], d["tool"]) for d in run["decisions"]] == [("before_action", "block", "lookup")]
    assert run["versions"] == {}  # nothing fitted judged it
    # the same store, read as a corpus by every command
    assert [e.episode_id for e in iter_corpus(store_url)] == [clean, looping, blocked]
    assert read_corpus(store_url).labels() == {"failed": 1, "unlabelled": 2}


def test_a_fitted_layer_says_which_version_judged_each_run(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"format": "guardrail-verifier-spec", "version": 2, "name": "mine"}))
    guard = Guard.default(record=str(tmp_path / "runs"), spec=str(spec))
    episode_id = one_run(guard, "Oslo")
    guard.close()
    import hashlib

    (summary,) = open_store(str(tmp_path / "runs")).summaries()
    assert summary.episode_id == episode_id
    assert summary.spec_sha256 == hashlib.sha256(spec.read_bytes()).hexdigest()


def test_an_episode_still_running_when_the_recorder_closes_is_recorded_incomplete(tmp_path):
    guard = Guard.default(record=str(tmp_path / "runs"))
    ctx = guard.start_episode(task="never finishes")
    ctx.on_step(tool_step(0, "Oslo", "Oslo: 280 K"))
    guard.close()
    (summary,) = open_store(str(tmp_path / "runs")).summaries()
    assert summary.status == "incomplete" and summary.n_steps == 1


class WriteOnlyStore(RunStore):
    """A store that is written to only: it has nothing to read back."""

    def set_labels(self, labels: Any) -> list[str]:
        return list(labels)

    def summaries(self, problems: Any = None) -> list[Any]:
        return []

    def episodes(self, ids: Any = None, *, problems: Any = None) -> Any:
        return iter(())


class SlowStore(WriteOnlyStore):
    """A store that takes its time: the agent must never wait for it, beyond an episode's end."""

    url = "slow://"

    def __init__(self) -> None:
        self.ops: list[Any] = []
        self.release = threading.Event()

    def write(self, batch: Any) -> None:
        self.release.wait(5)
        self.ops.extend(batch)


def test_a_full_queue_drops_steps_and_counts_them_and_never_blocks_the_agent():
    store = SlowStore()
    recorder = RunRecorder(store, max_queue=8, finish_timeout_s=0)
    guard = Guard([], recorder=recorder)
    ctx = guard.start_episode()
    started = time.perf_counter()
    for index in range(200):
        ctx.on_step(Step(index=index, kind=StepKind.TEXT, text="x"))
    hooks_s = time.perf_counter() - started
    ctx.finish()
    store.release.set()
    recorder.close()
    assert recorder.dropped >= 150
    assert hooks_s < 2.0  # the store waited up to 5 s per batch; the agent did not (a bound, not a benchmark)
    finish = [op for op in store.ops if type(op).__name__ == "Finish"]
    steps = [op for op in store.ops if type(op).__name__ == "StepLine"]
    assert len(finish) == 1 and finish[0].outcome.steps_dropped == 200 - len(steps)


def test_an_agent_that_never_waits_still_gets_every_step_recorded(tmp_path):
    # A CPU-bound agent thread (a batch replay, a benchmark) leaves the writer little of the GIL: before the
    # writer was waited for when behind, this dropped most of the steps (bench load, one thread: 14,874 of 20,000).
    guard = Guard.default(record=f"sqlite:///{tmp_path}/runs.db", record_options={"max_queue": 500},
                          mode="intervene")
    ids = []
    for n in range(400):
        ctx = guard.start_episode(task=f"replay {n}")
        for index in range(10):
            ctx.on_step(Step(index=index, kind=StepKind.TEXT, text=f"step {index} of replay {n}"))
        ids.append(ctx.finish().episode_id)
    guard.close()
    assert guard.recorder is not None and guard.recorder.dropped == 0
    summaries = open_store(f"sqlite:///{tmp_path}/runs.db", create=False).summaries()
    assert [s.episode_id for s in summaries] == ids and {s.status for s in summaries} == {"complete"}
    assert sum(len(e.steps) for e in open_store(f"sqlite:///{tmp_path}/runs.db", create=False).episodes()) == 4_000


class BrokenStore(WriteOnlyStore):
    url = "broken://"

    def write(self, batch: Any) -> None:
        raise OSError("disk full")


def test_a_failing_store_never_reaches_the_agent(caplog):
    recorder = RunRecorder(BrokenStore(), finish_timeout_s=1)
    guard = Guard.default(recorder=recorder, mode="intervene")
    for city in ("Oslo", "Lima"):
        one_run(guard, city)
    recorder.close()
    assert recorder.errors >= 1 and recorder.written == 0
    assert sum("could not write" in r.message for r in caplog.records) == 1  # said once, counted after


def test_a_killed_recorder_loses_no_finished_episode(tmp_path):
    store = f"sqlite:///{tmp_path}/runs.db"
    directory = str(tmp_path / "runs")
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from tests.test_runstore import one_run
        from guardrail import Guard, Step, StepKind
        for where in ({store!r}, {directory!r}):
            guard = Guard.default(record=where)
            for n in range(5):
                one_run(guard, f"city-{{n}}")
            ctx = guard.start_episode(task="killed mid-episode")
            ctx.on_step(Step(index=0, kind=StepKind.TEXT, text="half way"))
            guard.flush()
        print("ready", flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    for where in (store, directory):
        summaries = open_store(where, create=False).summaries()
        assert [s.status for s in summaries] == ["complete"] * 5 + ["incomplete"], where
        episodes = list(open_store(where, create=False).episodes())
        assert [len(e.steps) for e in episodes] == [2] * 5 + [1]


def test_a_directory_store_never_writes_through_a_planted_link(tmp_path):
    root = tmp_path / "runs"
    DirectoryStore(root).close()
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    os.symlink(outside, root / "planted.jsonl")
    os.mkfifo(root / "fifo.jsonl")
    recorder = RunRecorder(str(root), finish_timeout_s=1)
    guard = Guard([], recorder=recorder)
    for episode_id in ("planted", "fifo"):
        ctx = guard.start_episode(episode_id)
        ctx.on_step(Step(index=0, kind=StepKind.TEXT, text="x"))
        ctx.finish()
    kept = one_run(guard, "Oslo")
    guard.close()
    assert outside.read_text() == "untouched"
    assert recorder.errors >= 1
    assert [s.episode_id for s in open_store(str(root)).summaries()] == [kept]  # the rest is recorded


def test_a_store_directory_with_a_planted_link_or_bad_lines_reads_the_rest(tmp_path):
    root = tmp_path / "runs"
    guard = Guard.default(record=str(root))
    kept = [one_run(guard, "Oslo"), one_run(guard, "Lima")]
    guard.close()
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"index": 0, "kind": "final", "text": "OUTSIDE-SECRET"}) + "\n")
    (root / f"{kept[1]}.jsonl").unlink()
    os.symlink(secret, root / f"{kept[1]}.jsonl")
    with open(root / "runs.jsonl", "ab") as journal:
        journal.write(b"not json\n")
        journal.write(b'{"op": "begin", "header": {"episode_id": 5}}\n')
        journal.write(b'{"op": "label", "episode_id": "' + kept[0].encode() + b'", "label": ' + b"[" * 5000 +
                      b"]" * 5000 + b"}\n")
        journal.write(b'{"op": "finish", "episode_id": "nobody", "outcome": {}}\n')
        journal.write(b'{"op": "label", "episode_id": "' + kept[0].encode() + b'", "label": "healthy"}\n')
    problems: list[Any] = []
    episodes = list(open_store(str(root), create=False).episodes(problems=problems))
    assert [e.episode_id for e in episodes] == kept
    assert episodes[0].label == "healthy"
    assert "OUTSIDE-SECRET" not in json.dumps([e.model_dump(mode="json") for e in episodes])
    messages = [str(p) for p in problems]
    assert len(messages) == 5, messages
    assert any("outside the corpus directory" in m for m in messages)  # the link leads out: refused
    assert any("nested deeper" in m for m in messages)


def test_a_database_with_hostile_rows_reads_the_rest(tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/runs.db"
    guard = Guard.default(record=url)
    kept = one_run(guard, "Oslo")
    guard.close()
    conn = sqlite3.connect(tmp_path / "runs.db")
    rows = [("deep", "[" * 100_000 + "]" * 100_000), ("junk", "{not json"), ("typed", json.dumps({"episode_id": 7})),
            ("huge", json.dumps({"episode_id": "huge", "started_at": "x", "task": "y" * 5_000_000}))]
    for episode_id, header in rows:
        conn.execute("INSERT INTO guardrail_episodes (episode_id, status, header) VALUES (?, 'complete', ?)",
                     (episode_id, header))
    conn.execute("INSERT INTO guardrail_steps (episode_id, idx, body) VALUES (?, 5, ?)", (kept, "[" * 50_000))
    conn.execute("UPDATE guardrail_episodes SET label = ? WHERE episode_id = ?", ("x" * 1000, kept))
    conn.commit()
    conn.close()
    problems: list[Any] = []
    episodes = list(open_store(url, create=False).episodes(problems=problems))
    assert [(e.episode_id, e.label, len(e.steps)) for e in episodes] == [(kept, "unlabelled", 2)]
    assert len(problems) == 6, [str(p) for p in problems]  # four rows, one step, one label: one line each


def test_store_urls_that_cannot_be_opened_say_why(tmp_path):
    from guardrail.core.runstore import StoreError

    with pytest.raises(StoreError, match="no run store here"):
        open_store(str(tmp_path / "nothing"), create=False)
    with pytest.raises(StoreError, match="unknown store URL"):
        open_store("mongodb://localhost/runs")
    with pytest.raises(StoreError, match="no such database file"):
        open_store(f"sqlite:///{tmp_path}/missing.db", create=False)
    (tmp_path / "newer").mkdir()
    (tmp_path / "newer" / "runs.jsonl").write_text(json.dumps({"format": "guardrail-runs", "version": 99}) + "\n")
    with pytest.raises(StoreError, match="upgrade guardrail"):
        open_store(str(tmp_path / "newer"), create=False)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_several_processes_record_into_one_store(backend, tmp_path, request):
    url = f"sqlite:///{tmp_path}/runs.db" if backend == "sqlite" else \
        _postgres_store(request.getfixturevalue("postgres_dsn"))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from tests.test_runstore import one_run
        from guardrail import Guard
        guard = Guard.default(record={url!r})
        ids = [one_run(guard, f"city-{{n}}") for n in range(15)]
        guard.close()
        print(" ".join(ids))
    """)
    workers = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    recorded = set()
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        recorded |= set(out.split())
    summaries = open_store(url, create=False).summaries()
    assert {s.episode_id for s in summaries} == recorded and len(recorded) == 45
    assert all(s.status == "complete" and s.n_steps == 2 for s in summaries)

