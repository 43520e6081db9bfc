"""The telemetry featurizer: channel layout, deterministic hashing, grounding features, bounded work on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from monitors.features import G_SHAPE_SURPRISAL, G_WORD_NOVELTY, Telemetry, _hash_trigrams
from monitors.novelty import argument_words, entity_class
from tests.fuzzing import FUZZ, json_values, nasty_text


def _tool_step(index: int, name: str, args: dict, result: str, *, logprobs: list[float] | None = None,
               error: bool = False) -> Step:
    return Step(index=index, kind=StepKind.TOOL_CALL, text=f"[{name}({args}) -> {result}]",
                tool_events=[ToolEvent(name=name, args=args, result=result, is_error=error)],
                token_logprobs=logprobs or [], latency_s=0.4, output_tokens=20, error=error)


def _episode(i: int, logprobs: bool) -> Episode:
    lp = [-0.1, -0.5, -3.0] if logprobs else None
    steps = [
        _tool_step(0, "lookup_flight", {"origin": "Prague", "destination": "Lisbon"}, "Prague to Lisbon: $370",
                   logprobs=lp),
        _tool_step(1, "lookup_hotel", {"city": "Lisbon"}, "Lisbon hotel $49/night", logprobs=lp),
        Step(index=2, kind=StepKind.FINAL, text=f"Total for Lisbon: ${370 + 3 * 49 + i}", token_logprobs=lp or []),
    ]
    return Episode(episode_id=f"ep{i}", steps=steps, task="Price a trip from Prague to Lisbon with 3 hotel nights")


def test_uncertainty_channel_is_dropped_when_the_deployment_has_no_logprobs() -> None:
    without = Telemetry().fit([_episode(i, logprobs=False) for i in range(4)])
    with_lp = Telemetry().fit([_episode(i, logprobs=True) for i in range(4)])
    assert without.channels_ == ("e", "m", "g")
    assert with_lp.channels_ == ("e", "u", "m", "g")
    assert with_lp.dim_ == without.dim_ + 4


def test_feature_vector_has_the_fitted_layout_and_is_finite() -> None:
    telemetry = Telemetry().fit([_episode(i, logprobs=True) for i in range(4)])
    features = telemetry.transform(_episode(9, logprobs=True))
    assert features.shape == (3, telemetry.dim_)
    assert np.isfinite(features).all()
    e = features[0, telemetry.slices_["e"]]
    assert math.isclose(float(np.linalg.norm(e)), 1.0)


def test_trigram_hash_is_deterministic_and_content_sensitive() -> None:
    a = _hash_trigrams("lookup_flight -> $370", 32, 27, 1024)
    assert np.array_equal(a, _hash_trigrams("lookup_flight -> $370", 32, 27, 1024))
    assert not np.array_equal(a, _hash_trigrams("service unavailable (HTTP 503)", 32, 27, 1024))
    # Fixed values: the hash does not depend on PYTHONHASHSEED or the process.
    assert np.count_nonzero(a) > 5


def test_text_beyond_the_cap_is_not_hashed() -> None:
    head = "x" * 2000
    assert np.array_equal(_hash_trigrams(head + "A" * 10 + "y" * 2000, 32, 27, 1024),
                          _hash_trigrams(head + "B" * 10 + "y" * 2000, 32, 27, 1024))


def _reference_hash(text: str, cap: int) -> np.ndarray:
    """The hash as first written: encode everything, then keep the first 3/4 cap and last 1/4 cap bytes."""
    raw = text.encode("utf-8", "replace")
    if len(raw) > cap:
        raw = raw[: cap - cap // 4] + raw[-(cap // 4):]
    codes = np.frombuffer(raw, dtype=np.uint8).astype(np.uint32)
    grams = codes[:-2] | (codes[1:-1] << 8) | (codes[2:] << 16)
    buckets = (grams * np.uint32(2654435761)) >> np.uint32(26)
    counts = np.bincount(buckets, minlength=64)
    vec = counts[:32] - counts[32:]
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec.astype(float)


@pytest.mark.parametrize("text", ["", "ab", "lookup_flight -> $370", "é" * 700, "ü€" * 400 + "x" * 3000,
                                  "x" * 1023 + "\ud800" + "y" * 5, "\ud800" * 2000, "a" * 1025, "z€" * 20_000])
def test_long_texts_encode_only_the_ends_they_keep_and_hash_the_same(text: str) -> None:
    out = np.empty(32)
    hashed = _hash_trigrams(text, 32, 27, 1024, out=out)
    assert hashed is out
    assert np.array_equal(out, _reference_hash(text, 1024))
    assert np.array_equal(_hash_trigrams(text, 32, 27, 1024), out)


def test_uncertainty_of_hostile_logprobs_keeps_the_real_ones() -> None:
    from monitors.features import TelemetryStream

    clean = [-0.1, -3.0, -0.5, -2.3, -40.0]
    mean = sum(clean) / 5
    var = sum(v * v for v in clean) / 5 - mean * mean
    assert TelemetryStream._uncertainty(clean) == pytest.approx((mean, -30.0, math.sqrt(var), 2 / 5))
    # NaN, infinities and positive values are dropped, and what is left is bounded.
    hostile = [float("nan"), -0.1, float("-inf"), 3.0, -0.5, float("inf")]
    assert TelemetryStream._uncertainty(hostile) == TelemetryStream._uncertainty([-0.1, -0.5])
    assert TelemetryStream._uncertainty([-1e9, -0.2]) == TelemetryStream._uncertainty([-30.0, -0.2])
    assert TelemetryStream._uncertainty([float("nan")]) == (0.0, 0.0, 0.0, 0.0)


def test_grounding_flags_repeated_calls_and_irrelevant_results() -> None:
    telemetry = Telemetry().fit([_episode(i, logprobs=False) for i in range(4)])
    g = telemetry.slices_["g"]
    stream = telemetry.start("Find recent papers on optical flow")
    on_topic = stream.update(_tool_step(0, "search", {"query": "optical flow"}, "Optical flow estimation survey"))[g]
    off_topic = stream.update(_tool_step(1, "search", {"query": "optical flow"}, "Sourdough bread needs a starter"))[g]
    assert on_topic[0] == 1.0 and off_topic[0] == 0.0  # lexical relevance of the result to the call
    assert on_topic[2] == 0.0 and off_topic[2] == 1.0  # the identical call was made before


def test_error_shaped_result_is_flagged() -> None:
    telemetry = Telemetry().fit([_episode(i, logprobs=False) for i in range(4)])
    g = telemetry.slices_["g"]
    x = telemetry.start().update(_tool_step(0, "lookup", {"city": "Oslo"}, "Error: service unavailable (HTTP 503)."))
    assert x[g][4] == 1.0


def _g(telemetry: Telemetry, features: np.ndarray) -> np.ndarray:
    return features[:, telemetry.slices_["g"]]


def test_a_result_shape_the_tool_never_returned_is_surprising_and_a_familiar_one_is_not() -> None:
    telemetry = Telemetry().fit([_episode(i, logprobs=False) for i in range(6)])
    stream = telemetry.start("Price a trip from Oslo to Rome")
    familiar = stream.update(_tool_step(0, "lookup_flight", {"origin": "Oslo"}, "Oslo to Rome: $120"))
    corrupted = stream.update(_tool_step(1, "lookup_hotel", {"city": "Rome"}, "Rome hotel $49/night $905"))
    unknown = stream.update(_tool_step(2, "book_taxi", {"city": "Rome"}, "booked"))
    g = telemetry.slices_["g"]
    assert familiar[g][G_SHAPE_SURPRISAL] == 0.0
    # lookup_hotel returned one shape in all 6 healthy runs: a new one costs -log((0 + 1) / (6 + 2)) nats.
    assert corrupted[g][G_SHAPE_SURPRISAL] == pytest.approx(math.log(8))
    assert unknown[g][G_SHAPE_SURPRISAL] == pytest.approx(math.log(8))  # a tool no healthy run used


def test_a_tool_whose_results_always_differ_in_form_is_not_surprising() -> None:
    def episode(i: int) -> Episode:
        result = " ".join(["word"] * i) + "." * i + "!" * (i % 3)  # a new shape every run
        return Episode(episode_id=f"f{i}", steps=[_tool_step(0, "browse", {"url": "x"}, result),
                                                   Step(index=1, kind=StepKind.FINAL, text="done")])

    telemetry = Telemetry().fit([episode(i) for i in range(1, 11)])
    x = telemetry.start().update(_tool_step(0, "browse", {"url": "x"}, "?? something else entirely ??"))
    assert 0.0 < x[telemetry.slices_["g"]][G_SHAPE_SURPRISAL] < -math.log(10 / 12) + 1e-9


def test_training_episodes_are_featurized_as_if_left_out_of_the_lexicon() -> None:
    healthy = [_episode(i, logprobs=False) for i in range(5)]
    odd = healthy[4].model_copy(update={"steps": [
        _tool_step(0, "lookup_flight", {"origin": "Prague"}, "ERROR 503 retry"), *healthy[4].steps[1:]]})
    healthy[4] = odd
    telemetry = Telemetry()
    loo = telemetry.fit_transform(healthy)
    assert _g(telemetry, loo[4])[0, G_SHAPE_SURPRISAL] > 0.0  # only this episode had that shape: new to the rest
    assert _g(telemetry, telemetry.transform(odd))[0, G_SHAPE_SURPRISAL] == 0.0  # in-sample it is familiar
    assert np.array_equal(loo[4], telemetry.transform(odd, leave_out=True))
    assert np.array_equal(loo[0], telemetry.transform(healthy[0]))  # nothing unique there: LOO changes nothing


def test_word_novelty_is_the_share_of_words_no_healthy_run_and_not_the_episode_used() -> None:
    telemetry = Telemetry().fit([_episode(i, logprobs=False) for i in range(4)])
    stream = telemetry.start("Price a trip from Prague to Lisbon with 3 hotel nights")
    drift = Step(index=0, kind=StepKind.FINAL, text="Total for Lisbon: Shackleton crossed Antarctica")
    novelty = stream.update(drift)[telemetry.slices_["g"]][G_WORD_NOVELTY]
    assert novelty == pytest.approx(3 / 6)  # shackleton, crossed, antarctica of the six words
    again = stream.update(drift.model_copy(update={"index": 1}))[telemetry.slices_["g"]][G_WORD_NOVELTY]
    assert again == 0.0  # the episode's own words are not new twice


def test_the_lexicon_round_trips_through_its_state() -> None:
    telemetry = Telemetry().fit([_episode(i, logprobs=True) for i in range(4)])
    copy = Telemetry()
    copy.set_channels(telemetry.channels_)
    copy.set_state({k: np.array(v) for k, v in telemetry.get_state().items()})
    probe = _episode(7, logprobs=True).model_copy(update={"steps": [
        _tool_step(0, "lookup_flight", {"origin": "Oslo"}, "nothing like it"), _episode(7, True).steps[2]]})
    assert np.array_equal(copy.transform(probe), telemetry.transform(probe))
    with pytest.raises(ValueError, match="no healthy lexicon"):
        copy.set_state({})


def test_fit_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="power of two"):
        Telemetry(e_dim=24).fit([_episode(0, False)])
    with pytest.raises(ValueError, match="unknown channel"):
        Telemetry(channels=("e", "z")).fit([_episode(0, False)])


@pytest.mark.fuzz
@FUZZ
@given(text=nasty_text, args=json_values, result=st.none() | nasty_text,
       logprobs=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=8),
       latency=st.none() | st.floats(allow_nan=True, allow_infinity=True))
def test_featurizer_survives_any_step(text: str, args: object, result: str | None, logprobs: list[float],
                                      latency: float | None) -> None:
    telemetry = Telemetry(channels=("e", "u", "m", "g"))
    telemetry.set_channels(("e", "u", "m", "g"))
    telemetry.fit_lexicon([telemetry.episode_keys(_episode(i, logprobs=True)) for i in range(2)])
    step = Step(index=0, kind=StepKind.TOOL_CALL, text=text, token_logprobs=logprobs, latency_s=latency,
                tool_events=[ToolEvent(name="t", args=args, result=result)])
    stream = telemetry.start(text)
    for _ in range(2):
        x = stream.update(step)
        assert x.shape == (telemetry.dim_,)
        assert np.isfinite(x).all()


@given(st.text(alphabet="45 0123x_é٤٥\n-(", max_size=14))
def test_the_status_scan_finds_what_the_word_boundary_pattern_finds(text: str) -> None:
    import re

    from monitors.features import _status_in

    assert _status_in(text) == bool(re.search(r"\b[45]\d\d\b", text))


def test_entity_like_arguments_count_as_their_class() -> None:
    words, entities = argument_words("Dakar SKU-1003 12kg item-3 v2 USD window seat 1500", 1024)
    assert words == {"\x01Aa", "\x01a-9", "\x019a", "\x01a9", "\x01A", "window", "seat"}
    assert entities == {"dakar", "sku", "item", "usd"}  # their own words join the episode's context
    assert entity_class("Tallinn") == entity_class("Quito") and entity_class("SKU-2001") == entity_class("SKU-7")
    assert entity_class("quito") is None and entity_class("1500") is None


def test_a_city_no_healthy_run_named_is_not_novel_but_a_new_word_is() -> None:
    def run(i: int, city: str) -> Episode:  # no task given: the entities first appear in the call
        return Episode(episode_id=f"c{i}", steps=[
            _tool_step(0, "lookup_hotel", {"city": city}, "$120/night"),
            Step(index=1, kind=StepKind.FINAL, text=f"The hotel in {city} costs $120 a night.")])

    telemetry = Telemetry().fit([run(i, city) for i, city in enumerate(["Prague", "Lisbon", "Oslo", "Quito"])])
    unseen = telemetry.transform(run(9, "Tallinn"))
    assert _g(telemetry, unseen)[:, G_WORD_NOVELTY].tolist() == [0.0, 0.0]  # the answer repeats the call's city
    odd = telemetry.transform(run(9, "Tallinn").model_copy(update={"steps": [
        _tool_step(0, "lookup_hotel", {"city": "rainforest canopy"}, "$120/night")]}))
    assert _g(telemetry, odd)[0, G_WORD_NOVELTY] == pytest.approx(2 / 3)  # rainforest, canopy (not night): new


def test_argument_words_are_bounded_on_hostile_arguments() -> None:
    huge = "Ab1-" * 1_000_000 + "é" * 10_000
    words, entities = argument_words(huge, 1024)
    assert len(words) <= 2 and len(entities) <= 2  # only the capped head is read, as one shape class
    assert argument_words("\x00\ud800 ⁂ ²³ Ωmega", 1024)[0] <= {"\x01Aa", "\x01a", "mega"} | {"ωmega"}


def _reference_entity_class(token: str) -> str | None:
    """`entity_class` character by character, as first written (the ASCII fast path must agree with it)."""
    import re

    from monitors.novelty import _SHAPE_CLASSES, ENTITY_MARK

    if any(c.isdigit() for c in token):
        if not any(c.isalpha() for c in token):
            return None
        return ENTITY_MARK + re.sub("a+", "a", re.sub("9+", "9", token.translate(_SHAPE_CLASSES)))[:64]
    if token[0].isupper():
        return ENTITY_MARK + ("Aa" if any(c.islower() for c in token) else "A")
    return None


_TOKEN_CHARS = "aZk9Q0_.-" + "éÉǅΣς²٣ⅫK"  # ASCII letters, digits, joiners; then Unicode cases, digits, numerals


@given(st.text(alphabet=_TOKEN_CHARS, min_size=1, max_size=12))
def test_entity_class_equals_its_character_by_character_definition(token: str) -> None:
    assert entity_class(token) == _reference_entity_class(token)


@given(st.lists(st.text(alphabet=_TOKEN_CHARS + " ,:", max_size=10), max_size=8).map(" ".join))
def test_argument_words_equal_a_token_by_token_reading(text: str) -> None:
    import re

    from monitors.novelty import _ENTITY_TOKEN, _WORD

    plain, entities = set(_WORD.findall(text.lower())), set()
    for token in _ENTITY_TOKEN.findall(text):
        kind = _reference_entity_class(token)
        if kind is not None:
            plain.add(kind)
            entities.update(re.findall(r"[a-z][a-z0-9]{2,}", token.lower()))
    assert argument_words(text, 1024) == (plain - entities, entities)


def test_channels_in_any_order_are_gathered_where_their_slices_say() -> None:
    episodes = [_episode(i, logprobs=True) for i in range(4)]
    telemetry = Telemetry().fit(episodes)
    canonical = telemetry.transform(episodes[1])
    shuffled = Telemetry().fit(episodes)
    shuffled.set_channels(("g", "m", "e", "u"))  # as a model file or a distributed fit may list them
    features = shuffled.transform(episodes[1])
    for name in ("e", "u", "m", "g"):
        assert np.array_equal(features[:, shuffled.slices_[name]], canonical[:, telemetry.slices_[name]]), name
