"""`guardrail collect` writes a valid corpus, deterministically for a seed, with rejected episodes kept."""

from __future__ import annotations

import json
from pathlib import Path

from guardrail.core.cli import main
from guardrail.core.corpus import RejectedEntry, read_corpus
from guardrail.core.events import Episode
from traces.collect import ALL_CLASSES, collect_episode, requested_labels
from traces.tools import BookingDB


def _content(path: Path) -> list[list[dict[str, object]]]:
    manifest = json.loads((path / "manifest.json").read_text())
    episodes = []
    for entry in manifest["episodes"]:
        steps = []
        for line in (path / entry["file"]).read_text().splitlines():
            step = json.loads(line)
            step.pop("latency_s", None)  # measured, so it may differ between runs
            for event in step.get("tool_events", []):
                event.pop("latency_s", None)
            steps.append(step)
        episodes.append(steps)
    return episodes


def test_requested_labels_cover_every_class_with_the_healthy_share() -> None:
    labels = requested_labels(120, seed=1)
    assert set(labels) == set(ALL_CLASSES)
    assert labels.count("healthy") == 48


def test_collect_command_writes_a_corpus_the_reader_loads(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert main(["collect", "--framework", "autogen", "--n", "8", "--seed", "4", "-o", str(out), "--quiet",
                 "--json"]) == 0
    corpus = read_corpus(out)
    assert corpus.issues == []
    assert len(corpus.episodes) + len(corpus.rejected) == 8
    for episode in corpus.episodes:
        assert 4 <= episode.T <= 20
        assert episode.framework == "autogen"
        assert (episode.tau is None) == episode.is_healthy
        assert episode.meta["provenance"]["episode_seed"] == episode.meta["seed"]


def test_same_seed_same_corpus_content_and_another_seed_differs(tmp_path: Path) -> None:
    for name, seed in (("a", 9), ("b", 9), ("c", 10)):
        assert main(["collect", "--framework", "langgraph", "--n", "5", "--seed", str(seed), "-o",
                     str(tmp_path / name), "--quiet", "--json"]) == 0
    assert _content(tmp_path / "a") == _content(tmp_path / "b")
    assert _content(tmp_path / "a") != _content(tmp_path / "c")


def test_an_organic_request_whose_slip_changed_nothing_is_rejected_not_relabelled() -> None:
    db = BookingDB()
    # Seed 7, position 3: the skipped call was one the answer did not need (found by a 120-episode collection).
    outcome = collect_episode("langgraph", 3, "incomplete", 7, db=db)
    assert isinstance(outcome, RejectedEntry)
    assert outcome.requested_label == "incomplete" and "left the answer correct" in outcome.reason
    kept = collect_episode("langgraph", 4, "arithmetic_error", 7, db=db)
    assert isinstance(kept, Episode) and kept.label == "arithmetic_error" and kept.tau == kept.T - 1
