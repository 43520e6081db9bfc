"""The determinism probe and the batch quarantine against the three real mis-declared tool kinds."""

from __future__ import annotations

import pytest

from guardrail.consistency import ConsistencyGate, DeterminismRegistry, DeterminismStatus, PlanDecision
from guardrail.consistency.harness import DryRunHarness, ProposedCall
from traces.bench.consistency_sandbox import Sandbox


@pytest.fixture
def sandbox(tmp_path):
    # Background threads run, but change state only when a test triggers them.
    with Sandbox(tmp_path, seed=3, write_interval_s=None, reload_interval_s=None, sync_interval_s=None) as box:
        yield box


def probe_with(sandbox, registry, before_second_call):
    """Probe every tool; `before_second_call(tool)` runs between a tool's two identical probe calls."""
    harness = DryRunHarness(sandbox.tools, epoch=sandbox.epoch)
    calls: dict[str, int] = {}

    def runner(tool, args):
        calls[tool] = calls.get(tool, 0) + 1
        if calls[tool] == 2:
            before_second_call(tool)
        return harness.call(tool, args)

    return registry.probe(runner, epoch=sandbox.epoch)


def test_quiet_sandbox_probes_every_declared_tool_as_deterministic(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())
    DryRunHarness(sandbox.tools, epoch=sandbox.epoch).probe(registry)
    assert registry.misdeclared == []
    assert registry.status("list_directory") is DeterminismStatus.VERIFIED  # listdir order is declared unordered
    assert registry.status("get_current_time") is DeterminismStatus.BY_CONTRACT


def test_probe_catches_the_search_index_under_concurrent_writes(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())

    def writes_land(tool):
        if tool == "search_index":
            for _ in range(25):
                sandbox.writer.trigger()  # commits from the writer thread's own connection (seeded notes)

    outcome = probe_with(sandbox, registry, writes_land)["search_index"]
    assert outcome.status is DeterminismStatus.PROBE_FAILED
    assert outcome.first != outcome.second
    assert registry.misdeclared == ["search_index"]


def test_probe_catches_the_config_reader_racing_a_reload(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())

    def reload_lands(tool):
        if tool == "read_config":
            sandbox.reloader.trigger()  # the reloader thread rewrites config.json in place

    probe_with(sandbox, registry, reload_lands)
    assert registry.misdeclared == ["read_config"]


def test_probe_catches_the_user_resolver_when_the_cache_expires_between_calls(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())

    def cache_expires(tool):
        if tool == "resolve_user":
            sandbox.directory_sync.trigger()
            sandbox.clock.advance(sandbox.user_cache.ttl_s)

    probe_with(sandbox, registry, cache_expires)
    assert registry.misdeclared == ["resolve_user"]


def test_a_warm_cache_passes_the_probe_and_the_batch_quarantines_the_resolver(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())
    harness = DryRunHarness(sandbox.tools, epoch=sandbox.epoch)
    harness.probe(registry)
    assert registry.status("resolve_user") is DeterminismStatus.VERIFIED  # the record's case: the probe misses it
    gate = ConsistencyGate(registry)
    call = ProposedCall("resolve_user", {"handle": sandbox.handles[0]})
    samples = harness.run([call, call])
    sandbox.directory_sync.trigger()
    sandbox.clock.advance(sandbox.user_cache.ttl_s)  # the 60 s TTL runs out mid-batch
    samples += harness.run([call, call, call])
    verdict = gate.evaluate(samples)
    assert verdict.decision is PlanDecision.DEFER
    assert verdict.result_agreement == pytest.approx(0.4)
    assert registry.status("resolve_user") is DeterminismStatus.QUARANTINED
    assert registry.misdeclared == ["resolve_user"]


def test_fabricated_identifiers_on_an_honest_tool_are_rejected(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())
    harness = DryRunHarness(sandbox.tools, epoch=sandbox.epoch)
    harness.probe(registry)
    samples = harness.run([ProposedCall("get_order", {"order_id": f"ORD-9{i}77"}) for i in range(5)])
    assert all(s.error and s.error.startswith("LookupError") for s in samples)
    verdict = ConsistencyGate(registry).evaluate(samples)
    assert verdict.decision is PlanDecision.REJECT


def test_harness_tags_a_moving_epoch_and_the_gate_fails_closed(sandbox):
    from guardrail.consistency import EpochNotFixedError

    registry = DeterminismRegistry(sandbox.schemas())
    snapshots = iter(range(100))
    harness = DryRunHarness(sandbox.tools, epoch=lambda: f"snap-{next(snapshots) // 3}")
    samples = harness.run([ProposedCall("get_order", {"order_id": sandbox.order_ids[0]})] * 5)
    with pytest.raises(EpochNotFixedError):
        ConsistencyGate(registry).evaluate(samples)


def test_harness_turns_tool_failures_and_bad_json_into_observed_errors(sandbox):
    harness = DryRunHarness(sandbox.tools, epoch=sandbox.epoch)
    bad_json, unknown, outside = harness.run([
        ProposedCall("get_order", '{"order_id": '), ProposedCall("no_such_tool", {}),
        ProposedCall("read_file", {"path": "../../etc/passwd"})])
    assert bad_json.error.startswith("JSONDecodeError")
    assert unknown.error.startswith("LookupError")
    assert outside.error.startswith("PermissionError")


def test_probe_rounds_with_the_sandbox_time_advanced_catch_the_cache_expiry(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())

    def time_passes():  # what the sandbox does on its own between two batches: a sync, then the TTL runs out
        sandbox.directory_sync.trigger()
        sandbox.tick(sandbox.user_cache.ttl_s + 1)

    DryRunHarness(sandbox.tools, epoch=sandbox.epoch).probe(registry, advance=time_passes)
    assert registry.misdeclared == ["resolve_user"]
    assert "3 identical probe calls" in registry.reason("resolve_user")


def test_probe_rounds_catch_the_search_index_when_writes_land_between_rounds(sandbox):
    registry = DeterminismRegistry(sandbox.schemas())
    outcomes = DryRunHarness(sandbox.tools, epoch=sandbox.epoch).probe(
        registry, rounds=3, interval_s=0.0, advance=lambda: [sandbox.writer.trigger() for _ in range(25)])
    assert registry.misdeclared == ["search_index"]
    assert outcomes["search_index"].first != outcomes["search_index"].second


def test_probe_rounds_leave_the_statuses_alone_when_the_epoch_moves(sandbox):
    from guardrail.consistency import EpochNotFixedError

    registry = DeterminismRegistry(sandbox.schemas())
    epochs = iter(["e1", "e2"])
    with pytest.raises(EpochNotFixedError, match="moved"):
        registry.probe(DryRunHarness(sandbox.tools, epoch="e").call, epoch=lambda: next(epochs))
    assert set(registry.statuses().values()) <= {"unverified", "nondeterministic_by_contract"}
    with pytest.raises(ValueError, match="2 rounds"):
        registry.probe(lambda tool, args: 1, epoch="e", rounds=1)


def test_the_sandbox_tools_carry_json_schemas_with_argument_kinds(sandbox):
    kinds = {schema.name: {path: spec.kind.value for path, spec in schema.arguments.items()}
             for schema in sandbox.schemas()}
    assert kinds["search_index"] == {"query": "free_text", "limit": "parameter"}
    assert kinds["get_order"] == {"order_id": "identifier", "fields[]": "choice"}
    assert kinds["convert_currency"] == {"amount": "amount", "from_currency": "choice", "to_currency": "choice"}
    assert "Order number" in next(s for s in sandbox.schemas() if s.name == "get_order").documentation
