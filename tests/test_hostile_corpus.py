"""Corpus reading is confined and bounded: no reads outside the corpus, no devices, no hangs, no lost corpus (issue 15, item 6)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail.core import corpus as corpus_module
from guardrail.core.corpus import CorpusError, read_corpus
from tests.fuzzing import FUZZ, FUZZ_EXAMPLES, json_values
from tests.hostile.corpora import (
    OUTSIDE_SECRET,
    deep_line,
    good_lines,
    good_sentinel_lines,
    guardrail_corpus,
    make_fifo,
    make_sparse,
    plant_outside,
    sentinel_corpus,
)
from tests.hostile.memlimit import address_space_limit

MEMORY = 512 * 1024 * 1024  # extra address space a corpus read may take in these tests


def _read(root: Path):
    with address_space_limit(MEMORY):
        return read_corpus(root)


def _messages(corpus) -> str:
    return "\n".join(str(i) for i in corpus.issues)


@pytest.mark.parametrize("kind", ["guardrail", "sentinel"])
def test_manifest_paths_outside_the_corpus_are_refused_and_the_rest_loads(tmp_path, kind):
    secret = plant_outside(tmp_path)
    root = tmp_path / "corpus"
    escape = ["../outside/secret.jsonl", str(secret), "sub/../../outside/secret.jsonl"]
    if kind == "guardrail":
        entries = [{"episode_id": f"e{i}", "file": f} for i, f in enumerate(escape)] + [{"episode_id": "ok", "file": "ok.jsonl"}]
        guardrail_corpus(root, entries, {"ok.jsonl": good_lines()})
    else:
        entries = [{"episode_id": f"e{i}", "file": f} for i, f in enumerate(escape)] + [{"episode_id": "ok", "file": "ok.jsonl"}]
        sentinel_corpus(root, entries, {"ok.jsonl": good_sentinel_lines()})
    (root / "link.jsonl").symlink_to(secret)
    corpus = _read(root)
    assert [e.episode_id for e in corpus.episodes] == ["ok"]
    assert OUTSIDE_SECRET not in json.dumps([e.model_dump(mode="json") for e in corpus.episodes])
    assert _messages(corpus).count("outside the corpus directory") == 3


def test_a_symlink_out_of_the_corpus_is_refused(tmp_path):
    secret = plant_outside(tmp_path)
    root = sentinel_corpus(tmp_path / "c", [{"episode_id": "e", "file": "link.jsonl"}], {})
    (root / "link.jsonl").symlink_to(secret)
    corpus = _read(root)
    assert corpus.episodes == [] and "outside the corpus directory" in _messages(corpus)


def test_devices_fifos_and_directories_are_not_read(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "zero.jsonl").symlink_to("/dev/zero")
    make_fifo(root / "pipe.jsonl")
    (root / "dir.jsonl").mkdir()
    entries = [{"episode_id": n, "file": f"{n}.jsonl"} for n in ("zero", "pipe", "dir")] + [
        {"episode_id": "dev", "file": "/dev/zero"}, {"episode_id": "ok", "file": "ok.jsonl"}]
    sentinel_corpus(root, entries, {"ok.jsonl": good_sentinel_lines()})
    corpus = _read(root)  # a FIFO opened for reading without a writer would hang here
    assert [e.episode_id for e in corpus.episodes] == ["ok"]
    text = _messages(corpus)
    # the device behind a symlink resolves outside the corpus; the FIFO and the directory are not regular files
    assert text.count("not a regular file") == 2 and text.count("outside the corpus directory") == 2


def test_a_file_over_the_size_cap_is_refused_without_reading_it(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    make_sparse(root / "huge.jsonl", 8 * 1024 ** 3)  # 8 GiB claimed, nothing on disk
    sentinel_corpus(root, [{"episode_id": "huge", "file": "huge.jsonl"}, {"episode_id": "ok", "file": "ok.jsonl"}],
                    {"ok.jsonl": good_sentinel_lines()})
    corpus = _read(root)
    assert [e.episode_id for e in corpus.episodes] == ["ok"]
    assert "larger than" in _messages(corpus)


def test_a_line_over_the_line_cap_is_reported_and_the_other_lines_load(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "MAX_LINE_BYTES", 1000)
    lines = good_lines() + json.dumps({"index": 1, "kind": "final", "text": "y" * 5000}) + "\n" + good_lines()
    root = guardrail_corpus(tmp_path / "c", [{"episode_id": "e", "file": "e.jsonl", "T": 2}], {"e.jsonl": lines})
    corpus = _read(root)
    assert len(corpus.episodes[0].steps) == 2
    assert any(i.line == 2 and "longer than" in i.message for i in corpus.issues)


@pytest.mark.fuzz  # ten times deeper under make fuzz
@pytest.mark.parametrize("depth", [100_000, 2_000, 200])
def test_a_line_nested_too_deep_is_reported_and_the_corpus_loads(tmp_path, depth):
    depth = depth * (10 if FUZZ_EXAMPLES > 200 else 1)
    lines = good_lines() + deep_line(depth) + "\n" + good_lines()
    root = guardrail_corpus(tmp_path / "c", [{"episode_id": "e", "file": "e.jsonl", "T": 2},
                                             {"episode_id": "f", "file": "f.jsonl"}],
                            {"e.jsonl": lines, "f.jsonl": good_lines()})
    corpus = _read(root)
    assert [e.episode_id for e in corpus.episodes] == ["e", "f"]
    assert len(corpus.episodes[0].steps) == 2
    assert any(i.line == 2 and "nested deeper than" in i.message for i in corpus.issues)


def test_a_deeply_nested_manifest_is_a_corpus_error_not_a_crash(tmp_path):
    from guardrail.core.corpus import CorpusError

    root = tmp_path / "c"
    root.mkdir()
    (root / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CorpusError, match="nested deeper than"):
        _read(root)


def test_a_manifest_that_is_a_fifo_is_a_corpus_error(tmp_path):
    from guardrail.core.corpus import CorpusError

    root = tmp_path / "c"
    root.mkdir()
    make_fifo(root / "manifest.json")
    with pytest.raises(CorpusError, match="not a regular file"):
        _read(root)


@pytest.mark.parametrize("entry, expected", [
    ({"episode_id": "e", "file": 5}, "file"),
    ({"episode_id": 5, "file": "ok.jsonl"}, "episode_id"),
    ({"episode_id": "e", "file": "ok.jsonl", "failure_class": {"x": 1}}, "failure_class"),
    ({"episode_id": "e", "file": "ok.jsonl", "provenance": "langgraph"}, "provenance"),
    ({"episode_id": "e", "file": "ok.jsonl", "tau": "three"}, "tau"),
    ({"episode_id": "e", "file": ["ok.jsonl"]}, "file"),
])
def test_a_sentinel_entry_with_a_wrong_type_is_one_clear_issue(tmp_path, entry, expected):
    root = sentinel_corpus(tmp_path / "c", [entry, {"episode_id": "ok", "file": "ok.jsonl"}],
                           {"ok.jsonl": good_sentinel_lines()})
    corpus = _read(root)
    assert "ok" in [e.episode_id for e in corpus.episodes]
    bad = [i for i in corpus.issues if expected in i.message]
    assert len(bad) == 1 and "\n" not in bad[0].message and "Traceback" not in bad[0].message


def test_nothing_is_read_from_the_fifo_or_device_even_with_a_writer_waiting(tmp_path):
    """The confinement check comes before any open: a FIFO never blocks, a device is never opened."""
    root = tmp_path / "c"
    root.mkdir()
    make_fifo(root / "p.jsonl")
    sentinel_corpus(root, [{"episode_id": "p", "file": "p.jsonl"}], {})
    pid = os.getpid()
    assert read_corpus(root).episodes == [] and os.getpid() == pid


_ENTRY = st.dictionaries(st.sampled_from(["episode_id", "file", "failure_class", "tau", "T", "provenance", "model",
                                          "trace_sha256", "other"]), json_values, max_size=6)


@pytest.mark.fuzz
@FUZZ
@given(entries=st.lists(_ENTRY | json_values, max_size=5), lines=st.lists(json_values, max_size=4))
def test_any_sentinel_manifest_reads_or_is_a_corpus_error(tmp_path_factory, entries, lines):
    root = tmp_path_factory.mktemp("fuzz")
    body = "\n".join(json.dumps(line, default=str) for line in lines)
    entries = [{**e, "file": "ok.jsonl"} if isinstance(e, dict) and e.get("file") == "use" else e for e in entries]
    sentinel_corpus(root, entries, {"ok.jsonl": body, "a": body})
    with address_space_limit(MEMORY):
        try:
            corpus = read_corpus(root)
        except CorpusError:
            return
    assert all("\n" not in i.message for i in corpus.issues)
