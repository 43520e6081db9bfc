"""Trace corpora: round trip with checksums, corrupt lines reported with file:line, and the sentinel importer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardrail import Episode, Step, StepKind, ToolEvent
from guardrail.core.corpus import (
    CorpusError,
    RejectedEntry,
    parse_tool_text,
    read_corpus,
    write_corpus,
)


def make_episode(episode_id: str, label: str = "healthy", tau: int | None = None) -> Episode:
    steps = [
        Step(index=0, kind=StepKind.TOOL_CALL, text='[lookup_flight({"origin": "Oslo"}) -> $120]',
             tool_events=[ToolEvent(name="lookup_flight", args={"origin": "Oslo"}, result="$120")],
             token_logprobs=[-0.1, -0.02], latency_s=0.4, output_tokens=12),
        Step(index=1, kind=StepKind.FINAL, text="The total is $120 ✓", task="Book Oslo"),
    ]
    return Episode(episode_id=episode_id, steps=steps, task="Book Oslo", label=label, tau=tau,
                   framework="langgraph", model="scripted", tools=["lookup_flight"], meta={"seed": 7})


def test_a_written_corpus_reads_back_identically(tmp_path: Path):
    episodes = [make_episode("ep-000"), make_episode("ep-001", label="looping", tau=1)]
    manifest = write_corpus(tmp_path, episodes, name="unit", generator={"command": "test"},
                            rejected=[RejectedEntry(episode_id="ep-002", reason="injector found no tool call")])
    assert [e.sha256 for e in manifest.episodes] == [e.sha256 for e in manifest.episodes if len(e.sha256) == 64]
    corpus = read_corpus(tmp_path, strict=True)
    assert corpus.kind == "guardrail" and corpus.name == "unit"
    assert [e.episode_id for e in corpus.episodes] == ["ep-000", "ep-001"]
    assert corpus.episodes[1].label == "looping" and corpus.episodes[1].tau == 1
    assert corpus.episodes[0].steps == episodes[0].steps
    assert corpus.episodes[0].meta["seed"] == 7
    assert corpus.rejected[0].reason == "injector found no tool call"
    assert corpus.issues == []


def test_a_corrupt_line_is_reported_with_file_and_line_and_the_rest_loads(tmp_path: Path):
    write_corpus(tmp_path, [make_episode("ep-000"), make_episode("ep-001")])
    broken = tmp_path / "ep-001.jsonl"
    lines = broken.read_text().splitlines()
    broken.write_text(lines[0] + "\n{not json at all\n" + lines[1] + "\n")
    corpus = read_corpus(tmp_path)
    assert len(corpus.episodes) == 2  # nothing dropped
    assert len(corpus.episodes[1].steps) == 2  # both good steps of the damaged episode kept
    messages = [str(issue) for issue in corpus.issues]
    assert any(m.startswith("ep-001.jsonl:2: not valid JSON") for m in messages)
    assert any("sha256 does not match" in m for m in messages)
    with pytest.raises(CorpusError, match="ep-001.jsonl:2"):
        read_corpus(tmp_path, strict=True)


def test_a_line_that_is_json_but_not_a_step_is_reported(tmp_path: Path):
    write_corpus(tmp_path, [make_episode("ep-000")])
    path = tmp_path / "ep-000.jsonl"
    path.write_text(path.read_text() + json.dumps({"index": -3, "kind": "dance"}) + "\n")
    issues = [str(i) for i in read_corpus(tmp_path, verify=False).issues]
    assert any(i.startswith("ep-000.jsonl:3: not a valid step") for i in issues)
    assert any("manifest says T=2, read 2" not in i for i in issues)


def test_a_missing_episode_file_is_reported_not_fatal(tmp_path: Path):
    write_corpus(tmp_path, [make_episode("ep-000"), make_episode("ep-001")])
    (tmp_path / "ep-000.jsonl").unlink()
    corpus = read_corpus(tmp_path)
    assert [e.episode_id for e in corpus.episodes] == ["ep-001"]
    assert "cannot read episode file" in str(corpus.issues[0])


def test_a_corpus_from_another_format_version_is_refused_clearly(tmp_path: Path):
    write_corpus(tmp_path, [make_episode("ep-000")])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match="version 99.*reads version 1"):
        read_corpus(tmp_path)


def test_not_a_corpus_is_a_clear_error(tmp_path: Path):
    with pytest.raises(CorpusError, match="no manifest.json"):
        read_corpus(tmp_path)
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(CorpusError, match="not valid JSON"):
        read_corpus(tmp_path)
    (tmp_path / "manifest.json").write_text('{"hello": 1}')
    with pytest.raises(CorpusError, match="neither a guardrail manifest"):
        read_corpus(tmp_path)


def test_writing_is_atomic_and_leaves_no_temporary_files(tmp_path: Path):
    write_corpus(tmp_path, [make_episode("ep/../weird id")])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ep_.._weird_id.jsonl", "manifest.json"]


def test_duplicate_episode_ids_are_refused(tmp_path: Path):
    with pytest.raises(CorpusError, match="appears twice"):
        write_corpus(tmp_path, [make_episode("a"), make_episode("a")])


def test_tool_text_is_parsed_into_a_tool_event():
    [event] = parse_tool_text('Let\'s retry. [lookup_hotel({"city": "Cusco"}) -> $296/night]')
    assert event.name == "lookup_hotel" and event.args == {"city": "Cusco"} and event.result == "$296/night"
    [error] = parse_tool_text('[lookup_flight({"origin": "Oslo"}) -> ERROR: service unavailable]')
    assert error.is_error
    [junk] = parse_tool_text("[calculator(2+(3) -> 5]")
    assert junk.args == "2+(3" and junk.result == "5"
    assert parse_tool_text("no tool call here [just brackets]") == []


def test_every_sentinel_corpus_imports_with_the_manifest_counts(sentinel_dir: Path):
    for manifest_path in sorted(sentinel_dir.glob("*/manifest.json")):
        manifest = json.loads(manifest_path.read_text())
        corpus = read_corpus(manifest_path.parent)
        assert corpus.kind == "sentinel"
        assert corpus.issues == [], corpus.issues[:3]
        assert len(corpus.episodes) == len(manifest)
        assert [len(e.steps) for e in corpus.episodes] == [entry["T"] for entry in manifest]
        labels = {e.episode_id: e.label for e in corpus.episodes}
        for entry in manifest:
            assert labels[entry["episode_id"]] == (entry["failure_class"] or "healthy")
        for episode in corpus.episodes:
            assert episode.steps[-1].is_final or manifest_path.parent.name == "real_task_rollback"
            for step in episode.steps:
                if step.kind is StepKind.TOOL_CALL:
                    assert step.tool_events, (episode.episode_id, step.index, step.text[:80])


def test_sentinel_steps_keep_their_telemetry(sentinel_dir: Path):
    corpus = read_corpus(sentinel_dir / "ollama7b")
    episode = corpus.episodes[0]
    assert episode.model == "qwen2.5:7b"
    assert any(step.token_logprobs for step in episode.steps)
    assert episode.task and "Task:" in episode.task
    organic = read_corpus(sentinel_dir / "organic_demo7b_cold").episodes[0]
    assert organic.meta["expected_total"] == 2415
    assert organic.steps[0].tool_events[0].name == "lookup_flight"
    assert organic.steps[0].meta["tool_events_from_text"] is True


def test_reading_a_shard_opens_only_its_episode_files(tmp_path: Path):
    write_corpus(tmp_path, [make_episode(f"ep-{i}") for i in range(4)])
    (tmp_path / "ep-0.jsonl").write_text("corrupt\n")  # never opened: not in the shard
    from guardrail.core.corpus import read_episodes

    issues: list = []
    shard = read_episodes(tmp_path, ["ep-3", "ep-1", "missing"], issues=issues)
    assert [e.episode_id for e in shard] == ["ep-3", "ep-1"]
    assert issues == []


def test_reading_a_sentinel_shard_keeps_the_order_given(sentinel_dir: Path):
    from guardrail.core.corpus import read_episodes

    shard = read_episodes(sentinel_dir / "autogen7b", ["autogen-healthy-003", "autogen-looping-000"])
    assert [e.episode_id for e in shard] == ["autogen-healthy-003", "autogen-looping-000"]
    assert shard[1].label == "looping"


# --------------------------------------------------------------------------- later sentinel schemas
def _later_schema_corpus(root: Path, schema: int = 7) -> list[dict]:
    """A sentinel-format corpus as a later release might write it: new fields at every level, keys reordered,
    an unused field whose type changed (tool event `id` as a number), a new optional manifest key."""
    root.mkdir(parents=True, exist_ok=True)
    steps = [
        {"tool_events": [{"server": "mcp://flights", "latency_s": 0.2, "is_error": False, "result": "$120",
                          "name": "lookup_flight", "args": {"origin": "Oslo"}, "id": 17, "cache": {"hit": True},
                          "result_chars": 4, "result_truncated": False}],
         "schema": schema, "text": '[lookup_flight({"origin": "Oslo"}) -> $120]', "action": "tool_call",
         "token_logprobs": [-0.1, -0.3], "latency_s": 0.5, "output_tokens": 9, "error": False,
         "task": "Book Oslo", "reasoning": {"tokens": 31, "summary": "look up the flight"}, "cost_usd": 0.0004},
        {"action": "synthesis", "schema": schema, "text": "The total is $120.", "token_logprobs": [],
         "latency_s": 0.3, "output_tokens": 5, "error": False, "tool_events": [], "handoff": None},
    ]
    (root / "ep-0.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    manifest = [{"T": 2, "file": "ep-0.jsonl", "failure_class": None, "episode_id": "ep-0", "tau": None,
                 "model": "qwen2.5:7b", "has_logprobs": True, "agent_card": {"name": "booker", "version": "2"},
                 "provenance": {"backend": "langgraph", "tools": ["lookup_flight"], "region": "eu"}}]
    (root / "manifest.json").write_text(json.dumps(manifest))
    return steps


def test_a_later_sentinel_schema_keeps_unknown_fields_and_rejects_nothing(tmp_path: Path):
    raw = _later_schema_corpus(tmp_path / "later")
    corpus = read_corpus(tmp_path / "later", strict=True)  # a newer schema is a warning, not an error
    [warning] = corpus.issues
    assert warning.severity == "warning" and "schema 7 is newer than 5" in warning.message
    [episode] = corpus.episodes
    assert len(episode.steps) == 2 and episode.framework == "langgraph" and episode.tools == ["lookup_flight"]
    tool_step, final = episode.steps
    assert tool_step.extra == {"reasoning": raw[0]["reasoning"], "cost_usd": 0.0004}
    assert final.extra == {"handoff": None} and final.is_final
    [event] = tool_step.tool_events
    assert (event.name, event.args, event.result, event.latency_s) == ("lookup_flight", {"origin": "Oslo"}, "$120", 0.2)
    # A new field, and a field we do not use whose type changed, are both kept verbatim.
    assert event.extra == {"server": "mcp://flights", "cache": {"hit": True}, "id": 17} and event.id == ""
    assert episode.meta["agent_card"] == {"name": "booker", "version": "2"}
    assert episode.meta["provenance"]["region"] == "eu"


def test_later_schema_extras_round_trip_through_our_writer(tmp_path: Path):
    _later_schema_corpus(tmp_path / "later")
    imported = read_corpus(tmp_path / "later").episodes
    write_corpus(tmp_path / "ours", imported)
    again = read_corpus(tmp_path / "ours", strict=True)
    assert again.issues == []
    assert again.episodes[0].steps == imported[0].steps
    assert again.episodes[0].steps[0].tool_events[0].extra["server"] == "mcp://flights"
    assert again.episodes[0].meta["agent_card"] == imported[0].meta["agent_card"]


def test_our_own_format_stays_strict_about_unknown_step_fields(tmp_path: Path):
    write_corpus(tmp_path, [make_episode("ep-0")])
    line = json.loads((tmp_path / "ep-0.jsonl").read_text().splitlines()[0])
    (tmp_path / "ep-0.jsonl").write_text(json.dumps({**line, "surprise": 1}) + "\n")
    corpus = read_corpus(tmp_path, verify=False)
    assert any("surprise" in issue.message and "xtra" in issue.message for issue in corpus.issues)
    with pytest.raises(Exception, match="surprise"):
        ToolEvent(name="x", surprise=1)  # type: ignore[call-arg]


def test_a_used_field_of_the_wrong_type_rejects_that_step_only_with_one_message(tmp_path: Path):
    raw = _later_schema_corpus(tmp_path / "later")
    bad = {**raw[0], "text": {"not": "a string"}}
    (tmp_path / "later" / "ep-0.jsonl").write_text(json.dumps(bad) + "\n" + json.dumps(raw[1]) + "\n")
    corpus = read_corpus(tmp_path / "later", verify=False)
    errors = [i for i in corpus.issues if i.severity == "error"]
    assert [(i.file, i.line) for i in errors if i.line] == [("ep-0.jsonl", 1)]
    assert "text" in errors[0].message
    assert [s.is_final for s in corpus.episodes[0].steps] == [True]


def test_a_manifest_entry_with_a_bad_used_field_is_reported_and_the_rest_load(tmp_path: Path):
    _later_schema_corpus(tmp_path / "later")
    manifest = json.loads((tmp_path / "later" / "manifest.json").read_text())
    manifest.append({**manifest[0], "episode_id": "ep-1", "tau": "soon"})
    (tmp_path / "later" / "manifest.json").write_text(json.dumps(manifest))
    corpus = read_corpus(tmp_path / "later")
    assert [e.episode_id for e in corpus.episodes] == ["ep-0"]
    assert any("'ep-1'" in i.message and "tau" in i.message for i in corpus.issues)


def test_a_real_corpus_rewritten_in_a_later_schema_scores_identically(sentinel_dir: Path, tmp_path: Path):
    from monitors.monitor import StepMonitor

    source = sentinel_dir / "autogen7b"
    manifest = json.loads((source / "manifest.json").read_text())
    later = tmp_path / "autogen_later"
    later.mkdir()
    for entry in manifest:
        lines = (source / entry["file"]).read_text().splitlines()
        rewritten = []
        for line in lines:
            step = json.loads(line)
            step["tool_events"] = [{**dict(reversed(list(e.items()))), "span_id": "abc", "retries": 0}
                                   for e in step.get("tool_events") or []]
            rewritten.append(json.dumps({"trace_v": {"x": 1}, **dict(reversed(list(step.items()))), "schema": 6}))
        (later / entry["file"]).write_text("\n".join(rewritten) + "\n")
    (later / "manifest.json").write_text(json.dumps([{**e, "trace_sha256": None, "new_key": [1, 2]}
                                                     for e in manifest]))
    original, rewritten_corpus = read_corpus(source), read_corpus(later)
    assert [i.severity for i in rewritten_corpus.issues] == ["warning"]
    assert len(rewritten_corpus.episodes) == len(original.episodes)
    healthy = [e for e in original.episodes if e.is_healthy][:20]
    monitor = StepMonitor().fit(healthy)
    for a, b in zip(original.episodes[::15], rewritten_corpus.episodes[::15], strict=True):
        assert monitor.score_episode(a).scores == monitor.score_episode(b).scores
        assert b.steps[0].extra == {"trace_v": {"x": 1}}
