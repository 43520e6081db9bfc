"""Deterministic verifiers: total consistency, required coverage, tool contracts, numeric grounding, completion.

Specs are written by hand (`verifiers/specs/`) or fitted from healthy runs (`fit_spec`).
"""

from verifiers.contract import Classified, Contract, ContractError, classify_result, contracts_for
from verifiers.fit import fit_spec, fit_spec_report
from verifiers.layer import VerifierLayer
from verifiers.numbers import Figure, NumberFormatError, UnreadableFigure, find_figures, read_number
from verifiers.offline import EpisodeVerdict, verify_episode
from verifiers.spec import CHECKS, SpecError, VerifierSpec, builtin_specs, dump_spec, load_spec, pick_spec

__all__ = [
    "CHECKS",
    "Classified",
    "Contract",
    "ContractError",
    "EpisodeVerdict",
    "Figure",
    "NumberFormatError",
    "SpecError",
    "UnreadableFigure",
    "VerifierLayer",
    "VerifierSpec",
    "builtin_specs",
    "classify_result",
    "contracts_for",
    "dump_spec",
    "find_figures",
    "fit_spec",
    "fit_spec_report",
    "load_spec",
    "pick_spec",
    "read_number",
    "verify_episode",
]
