"""The committed testbed corpora load cleanly and hold what the issue asks: >= 300 episodes per framework, every class."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardrail.core.corpus import read_corpus
from traces.collect import ALL_CLASSES

CORPORA = Path(__file__).resolve().parents[1] / "traces" / "corpora"


@pytest.mark.parametrize(("name", "framework"), [("testbed_langgraph", "langgraph"), ("testbed_autogen", "autogen")])
def test_committed_corpus_loads_with_every_class_and_valid_onsets(name: str, framework: str) -> None:
    corpus = read_corpus(CORPORA / name)
    assert corpus.issues == []
    assert len(corpus.episodes) >= 300
    assert set(corpus.labels()) == set(ALL_CLASSES)
    assert all(r.reason for r in corpus.rejected)
    for episode in corpus.episodes:
        assert episode.framework == framework
        assert 4 <= episode.T <= 20
        if episode.is_healthy:
            assert episode.tau is None
        else:
            assert episode.tau is not None and 0 <= episode.tau < episode.T


@pytest.mark.parametrize(("name", "framework"), [("real_smollm2_langgraph", "langgraph"),
                                                 ("real_smollm2_autogen", "autogen")])
def test_committed_real_corpus_loads_with_model_provenance_and_logprobs(name: str, framework: str) -> None:
    corpus = read_corpus(CORPORA / name)
    assert corpus.issues == []
    assert corpus.episodes and all(r.reason for r in corpus.rejected)
    labels = corpus.labels()
    assert labels.get("healthy", 0) > 0 and labels.get("fabricated_argument", 0) > 0  # the model's own outcomes
    assert any(label in labels for label in ("looping", "tool_cascade", "timeout"))  # injected into real runs
    for episode in corpus.episodes:
        model = episode.meta["provenance"]["model"]
        assert episode.framework == framework and model["model"] == "local:smollm2"
        assert model["model_sha256"] and len(model["model_sha256"]) == 64 and model["seed"] is not None
        assert model["sampling"]["temperature"] == 0.2
        assert all(step.logprobs_available for step in episode.steps)
        assert (episode.tau is None) == episode.is_healthy
        assert episode.tau is None or 0 <= episode.tau < episode.T
