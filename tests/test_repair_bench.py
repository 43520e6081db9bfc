"""`guardrail bench repair`: the JSON shape, the paired exact test, and the untouched-original check, on a tiny run."""

from __future__ import annotations

import json

import pytest

from guardrail.core.cli import main
from traces.bench.repair import JSON_KEYS, mcnemar_exact


def test_mcnemar_counts_only_discordant_pairs() -> None:
    assert mcnemar_exact([True, False], [True, False]) == 1.0
    # 8 pairs where only the rung succeeded, none the other way: p = 2 * 0.5**8
    assert mcnemar_exact([True] * 8 + [False] * 4, [False] * 8 + [False] * 4) == pytest.approx(2 * 0.5**8)


def test_bench_prints_one_json_object_per_rung_with_the_issue_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "repair", "--episodes", "3", "--repeats", "1", "--rungs", "located", "--json", "--quiet"])

    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [row["rung"] for row in rows] == ["resample", "located"]
    assert all(tuple(row) == JSON_KEYS for row in rows)
    summary = json.loads(err.splitlines()[0])
    assert summary["episodes"] == 3
    selected = summary["selected"]
    assert summary["original_branch_untouched"] == f"{selected}/{selected}"
    assert all(row["n"] == selected for row in rows)
    assert "scripted testbed policy" in err


def test_a_seeded_real_client_forks_with_a_new_seed_and_gets_its_own_back() -> None:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from traces.bench.repair import _Episode, _reseed
    from traces.policy import Policy

    model = ChatOpenAI(base_url="http://127.0.0.1:9/v1", api_key=SecretStr("x"), model="m", seed=7)
    episode = _Episode(0, None, Policy(seed=7), None, model, {}, {}, False, [], "checks", [])
    _reseed(episode, 0)
    assert model.seed == 8  # not the original's 7: resample would replay the original call's tokens
    _reseed(episode, 2)
    assert model.seed == 10
    _reseed(episode, None)
    assert model.seed == 7
