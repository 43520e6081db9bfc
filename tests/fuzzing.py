"""Hypothesis settings shared by the fuzz tests: small in `make test`, large under `make fuzz`."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ_EXAMPLES = int(os.environ.get("GUARDRAIL_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=FUZZ_EXAMPLES <= 200,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Text an agent can produce at its worst: NUL bytes, lone surrogates, control and RTL characters.
nasty_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200) | st.sampled_from(
    ["\x00", "\ud800", "a\udfffb", "\u202e", "\r\n", "\ufeff", "${HOME}", "$(rm -rf /)", "`id`", "'\"\\"]
)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | nasty_text
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(nasty_text, inner, max_size=4), max_leaves=20)
