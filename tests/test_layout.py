"""The layout holds: the core and the five layers run with no agent framework installed, and say what is missing."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("langgraph", "langchain", "langchain_core", "autogen_agentchat", "autogen_core", "autogen_ext",
              "matplotlib")


def run_without_frameworks(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where every agent framework and matplotlib fail to import."""
    blocker = textwrap.dedent(f"""
        import sys
        for name in {FRAMEWORKS!r}:
            sys.modules[name] = None  # `import name` (and any submodule) now raises ImportError
    """)
    return subprocess.run([sys.executable, "-c", blocker + textwrap.dedent(code)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_the_guard_with_gate_monitor_and_verifiers_runs_without_any_framework(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("todo\n")
    corpus = REPO / "traces" / "corpora" / "testbed_langgraph"
    done = run_without_frameworks(f"""
        import sys
        import guardrail, monitors, verifiers, repair
        from guardrail import Action, Guard
        from guardrail.core.corpus import read_corpus
        from monitors import StepMonitor
        from monitors.model_file import save_monitor

        healthy = read_corpus({str(corpus)!r}).healthy()
        save_monitor(StepMonitor().fit(healthy[:40]).calibrate(healthy[40:60]), "m.npz")
        guard = Guard.default(workspace=".", model="m.npz", spec="booking_tools", mode="intervene")
        episode = guard.start_episode(task=healthy[60].task)
        blocked = episode.before_action(Action.shell("cat notes.md && python -m pytest tests/test_nope.py"))
        for step in healthy[60].steps:
            episode.on_step(step)
        finished = episode.finish()
        loaded = sorted(name for name in {FRAMEWORKS!r} if sys.modules.get(name) is not None)
        print([layer.name for layer in guard.layers], blocked.verdict.value, finished.verdict.value, loaded)
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().startswith("['gate', 'monitor', 'verifier'] block ")
    assert done.stdout.strip().endswith(" []")


def test_an_adapter_without_its_framework_names_the_extra_to_install(tmp_path: Path) -> None:
    done = run_without_frameworks("""
        for module, extra in (("adapters.langchain", "langgraph"), ("adapters.autogen", "autogen"),
                              ("adapters.langgraph_repair", "langgraph"), ("adapters.autogen_repair", "autogen")):
            try:
                __import__(module)
            except ImportError as exc:
                assert f"pip install 'guardrail[{extra}]'" in str(exc), str(exc)
                print(module, "ok")
            else:
                raise SystemExit(f"{module} imported without its framework")
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(" ok") == 4


def test_the_core_never_imports_the_facade_or_anything_above_it() -> None:
    # import-linter (make lint) checks the layers; this also catches `import guardrail` / `from guardrail import`,
    # which would run the facade from inside the core.
    above = ("guardrail.app", "guardrail.gate", "guardrail.consistency", "monitors", "verifiers", "repair",
             "adapters", "traces")
    offenders = []
    for path in sorted((REPO / "guardrail" / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                if name == "guardrail" or name.startswith(above):
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert offenders == []


def test_the_product_wheel_does_not_ship_the_testbed() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(pattern.startswith("traces") for pattern in shipped)
    assert "langgraph" not in " ".join(project["project"]["dependencies"])
