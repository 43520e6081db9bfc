"""The product's command table: what `guardrail COMMAND` runs (registered under the `guardrail.cli` entry point)."""

from guardrail.core.cli import CommandSpec

__all__ = ["TABLE"]

# name -> where its Command lives. Adding a command is one line here plus its module.
TABLE: dict[str, CommandSpec] = {
    "inspect": CommandSpec("guardrail.core.inspect_cli:INSPECT", "list a corpus's episodes, labels and corrupt lines"),
    "runs": CommandSpec("guardrail.core.runstore.cli:RUNS", "list a run store's recorded episodes"),
    "import": CommandSpec("guardrail.app.importers.cli:IMPORT", "import LangGraph threads, OTLP spans, agent trajectories"),
    "label": CommandSpec("guardrail.core.runstore.cli:LABEL", "label recorded episodes (healthy, failed, yours)"),
    "check": CommandSpec("guardrail.gate.cli:CHECK", "gate one proposed action (or a batch) against a workspace"),
    "fit": CommandSpec("monitors.cli:FIT", "fit the step monitor on healthy episodes"),
    "score": CommandSpec("monitors.cli:SCORE", "score episodes with a fitted monitor"),
    "verify": CommandSpec("verifiers.cli:VERIFY", "run the deterministic verifiers over a corpus"),
    "fit-spec": CommandSpec("verifiers.fit_cli:FIT_SPEC", "infer a verifier spec from a corpus's healthy episodes"),
    "report": CommandSpec("guardrail.app.report:REPORT", "a static site of a run store or corpus: summary, drift, "
                                                         "one page per episode"),
    "drift": CommandSpec("guardrail.app.drift:DRIFT", "has the healthy null drifted? alarm rate vs budget, p-values, "
                                                      "channels"),
    "init": CommandSpec("guardrail.app.config_cli:INIT", "write a commented guardrail.toml for the agent here"),
    "config": CommandSpec("guardrail.app.config_cli:CONFIG", "check a guardrail.toml, print its JSON Schema or "
                                                             "override variables"),
    "audit-traj": CommandSpec("guardrail.app.audit:AUDIT_TRAJ", "gate every action of a recorded SWE-agent .traj"),
    "mcp-proxy": CommandSpec("guardrail.app.mcp_proxy_cli:MCP_PROXY", "guard every tool call in front of an MCP server",
                             distribution="'guardrail[mcp]'"),
}
