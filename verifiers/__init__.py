"""Deterministic verifiers: total consistency, required coverage, tool contracts, numeric grounding, completion."""

from verifiers.contract import Classified, Contract, ContractError, classify_result, contracts_for
from verifiers.layer import VerifierLayer
from verifiers.numbers import Figure, NumberFormatError, UnreadableFigure, find_figures, read_number
from verifiers.offline import EpisodeVerdict, verify_episode
from verifiers.spec import CHECKS, SpecError, VerifierSpec, builtin_specs, load_spec, pick_spec

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
    "find_figures",
    "load_spec",
    "pick_spec",
    "read_number",
    "verify_episode",
]
