"""`guardrail import langgraph`: the threads a LangGraph app persisted, on a real SqliteSaver and PostgresSaver, into a store.

The agent is written here (its own tools, a scripted chat model) and guarded zero-config with
recording on, so each imported step can be compared with the one `GuardMiddleware` recorded live for
the same messages: they must be the same bytes. Then the imported store is read as users read it
(`guardrail runs --json`, `guardrail label --clean-as`, `guardrail fit-spec`), and a checkpointer
with hostile rows gives one problem per bad thread while the good ones go in.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import ormsgpack
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from adapters.langchain import GuardMiddleware
from guardrail import Guard
from guardrail.app.importers.langgraph import MAX_MESSAGES
from guardrail.core.cli import main
from guardrail.core.runstore import open_store


# ----------------------------------------------------------------------------- the user's own agent
class ScriptedChat(GenericFakeChatModel):
    """A chat model that replays its turns; tools are bound by the agent, the script already knows them."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def weather(city: str) -> str:
    """Today's temperature in a city, in degrees Celsius."""
    return json.dumps({"city": city, "celsius": {"Paris": 18, "Rome": 24, "Oslo": 3}.get(city, 12)})


@tool
def convert(value: float, unit: Literal["c_to_f", "f_to_c"]) -> str:
    """Convert a temperature between Celsius and Fahrenheit."""
    return f"{value * 9 / 5 + 32:.1f}" if unit == "c_to_f" else f"{(value - 32) * 5 / 9:.1f}"


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content=f"I will use {name}.", tool_calls=[{"name": name, "args": args, "id": call_id}])


def healthy_turns(city: str, celsius: int) -> list[AIMessage]:
    return [call("weather", f"w-{city}", city=city), call("convert", f"c-{city}", value=celsius, unit="c_to_f"),
            AIMessage(content=f"It is {celsius * 9 / 5 + 32:.1f}F in {city}.")]


# Thread -> the user's turns, each with the model's script for it. "oslo" breaks the tools' own schemas
# (a missing required argument, a value outside the enum): the zero-config guard blocks those calls.
SCRIPTS: dict[str, list[tuple[str, list[AIMessage]]]] = {
    "paris": [("How warm is Paris in Fahrenheit?", healthy_turns("Paris", 18))],
    "oslo": [("How warm is Oslo in Fahrenheit?", [
        call("weather", "w1"), call("weather", "w2", city="Oslo"), call("convert", "c1", value=3, unit="kelvin"),
        call("convert", "c2", value=3, unit="c_to_f"), AIMessage(content="It is 37.4F in Oslo.")])],
    "rome": [("How warm is Rome in Fahrenheit?", healthy_turns("Rome", 24)),
             ("And in Celsius?", [AIMessage(content="It is 24C in Rome.")])],
    **{f"city-{n}": [(f"How warm is Paris in Fahrenheit? ({n})", healthy_turns("Paris", 18))] for n in range(5)},
}


def run_agent(checkpointer: Any, record: str) -> None:
    """Every scripted thread through the guarded agent, recorded live into `record`."""
    guard = Guard.default(mode="intervene", record=record)
    try:
        for thread, turns in SCRIPTS.items():
            for question, script in turns:
                agent = create_agent(ScriptedChat(messages=iter(script)), [weather, convert],
                                     middleware=[GuardMiddleware(guard)], checkpointer=checkpointer)
                agent.invoke({"messages": [{"role": "user", "content": question}]},
                             {"configurable": {"thread_id": thread}})
    finally:
        guard.close()


def step_bodies(store: str) -> list[tuple[str | None, list[str], list[dict[str, Any]]]]:
    """(task, tools, the stored steps as JSON) of every episode of a store, oldest first; the guard's verdict on a
    step set apart (only a live run has one)."""
    out = []
    with open_store(store, create=False) as opened:
        for episode in opened.episodes():
            bodies = []
            for step in episode.steps:
                body = step.model_dump(mode="json")
                body["meta"].pop("guard", None)
                bodies.append(body)
            out.append((episode.task, sorted(episode.tools), bodies))
    return out


def runs_json(store: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["runs", store, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def import_langgraph(checkpointer: str, store: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["import", "langgraph", "--checkpointer", checkpointer, "-o", store])
    out = capsys.readouterr()
    return code, out.out, out.err


def check_imported_like_live(live: str, imported: str, capsys: pytest.CaptureFixture[str]) -> None:
    recorded, read_back = step_bodies(live), step_bodies(imported)
    assert len(recorded) == len(read_back) == sum(len(turns) for turns in SCRIPTS.values())
    assert read_back == recorded  # the same steps, byte for byte, as the live guard recorded them

    runs = runs_json(imported, capsys)
    by_id = {r["episode_id"]: r for r in runs}
    assert set(by_id) == {*SCRIPTS, "rome#2"}
    assert {r["label"] for r in runs} == {"unlabelled"} and {r["framework"] for r in runs} == {"langgraph"}
    assert by_id["paris"]["n_steps"] == 3 and by_id["rome#2"]["n_steps"] == 1
    assert by_id["rome#2"]["task"] == "And in Celsius?"
    oslo = step_bodies(imported)[[r["episode_id"] for r in runs].index("oslo")][2]
    blocked = [e for s in oslo for e in s["tool_events"] if e.get("guard_message")]
    assert [e["id"] for e in blocked] == ["w1", "c1"]  # the guard's messages, apart from the tools' results
    assert all(e["result"] is None for e in blocked)  # the blocked calls never ran


# ----------------------------------------------------------------------------- SQLite
def test_sqlite_threads_are_imported_as_the_live_guard_recorded_them(tmp_path: Path, capsys):
    database = tmp_path / "app.db"
    with SqliteSaver.from_conn_string(str(database)) as saver:
        run_agent(saver, f"sqlite:///{tmp_path / 'live.db'}")

    imported = f"sqlite:///{tmp_path / 'imported.db'}"
    code, out, err = import_langgraph(f"sqlite:///{database}", imported, capsys)
    assert code == 0, err
    assert out.startswith(f"imported {len(SCRIPTS) + 1} episode(s)")
    check_imported_like_live(f"sqlite:///{tmp_path / 'live.db'}", imported, capsys)

    # The user's loop on what was imported: label the clean runs, fit a spec from them.
    capsys.readouterr()
    assert main(["label", imported, "--clean-as", "healthy", "--include-imported"]) == 0
    assert f"labelled {len(SCRIPTS) + 1} clean unlabelled episode(s)" in capsys.readouterr().out
    assert main(["fit-spec", imported, "-o", str(tmp_path / "spec.json")]) == 0, capsys.readouterr().err
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert "weather" in json.dumps(spec) and "convert" in json.dumps(spec)

    # Importing again replaces what the last import wrote: the same episodes, not twice as many.
    assert import_langgraph(f"sqlite:///{database}", imported, capsys)[0] == 0
    assert len(runs_json(imported, capsys)) == len(SCRIPTS) + 1


def test_the_checkpointer_database_is_never_written(tmp_path: Path, capsys):
    database = tmp_path / "app.db"
    with SqliteSaver.from_conn_string(str(database)) as saver:
        run_agent(saver, str(tmp_path / "live"))
    before = database.read_bytes()
    assert import_langgraph(f"sqlite:///{database}", str(tmp_path / "runs"), capsys)[0] == 0
    assert database.read_bytes() == before


def test_a_checkpointer_that_is_not_there_is_refused_before_the_store_is_made(tmp_path: Path, capsys):
    code, _, err = import_langgraph(f"sqlite:///{tmp_path / 'nope.db'}", str(tmp_path / "runs"), capsys)
    assert code == 2 and "no such SQLite database" in err and not (tmp_path / "runs").exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    code, _, err = import_langgraph(f"sqlite:///{empty}", str(tmp_path / "runs"), capsys)
    assert code == 2 and "no LangGraph checkpoints here" in err
    code, _, err = import_langgraph("mysql://x/y", str(tmp_path / "runs"), capsys)
    assert code == 2 and "sqlite:///PATH or postgresql://" in err


# ----------------------------------------------------------------------------- hostile rows
def put(saver: Any, thread: str, values: dict[str, Any]) -> None:
    """A checkpoint written through the saver's own API (what a buggy or hostile writer can store)."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = {key: 1 for key in values}
    saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint, {}, {k: 1 for k in values})


def planted_call(target: Path) -> bytes:
    """A checkpoint whose messages, deserialized by LangGraph's default (permissive) serializer, call
    ``builtins.open(target, "w")``: a planted row that runs code in whoever reads it."""
    call_ext = ormsgpack.Ext(1, ormsgpack.packb(["builtins", "open", [str(target), "w"]]))
    return ormsgpack.packb({"v": 4, "id": "1f0-planted", "ts": "2026-01-01T00:00:00+00:00",
                            "channel_values": {"messages": [call_ext]}, "channel_versions": {"messages": 1},
                            "versions_seen": {}})


def test_hostile_rows_give_one_problem_per_thread_and_the_rest_is_imported(tmp_path: Path, capsys):
    database = tmp_path / "app.db"
    marker = tmp_path / "written-by-a-checkpoint"
    with SqliteSaver.from_conn_string(str(database)) as saver:
        run_agent(saver, str(tmp_path / "live"))
        deep: Any = "x"
        for _ in range(100):
            deep = {"k": deep}
        put(saver, "wrong-type", {"messages": "not a list of messages"})
        put(saver, "not-messages", {"messages": [1, 2, 3]})
        put(saver, "no-messages", {"answer": 42})
        put(saver, "huge", {"messages": [HumanMessage(content="hi")] * (MAX_MESSAGES + 1)})
        put(saver, "deep", {"messages": [HumanMessage(content="hi"),
                                          AIMessage(content="", tool_calls=[{"name": "weather", "args": deep, "id": "d"}])]})
        put(saver, "only-the-question", {"messages": [HumanMessage(content="anyone there?")]})
        saver.conn.execute("INSERT INTO checkpoints VALUES (?, '', ?, NULL, 'msgpack', ?, '{}')",
                           ("planted", "1f0-planted", planted_call(marker)))
        saver.conn.execute("INSERT INTO checkpoints VALUES (?, '', ?, NULL, 'msgpack', ?, '{}')",
                           ("garbage", "1f0-garbage", bytes(range(256)) * 4))
        saver.conn.execute("INSERT INTO checkpoints VALUES (?, '', ?, NULL, 'pickle', ?, '{}')",
                           ("pickled", "1f0-pickled", b"\x80\x04K\x01."))
        saver.conn.execute("INSERT INTO checkpoints VALUES (?, '', ?, NULL, 'msgpack', ?, 'not json')",
                           (7, "1f0-int-id", b"\xc0"))
        saver.conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE thread_id = 'city-0'", (b"\xff" * 64,))
        saver.conn.commit()

    # The planted row is a real attack: LangGraph's default serializer runs it.
    row = sqlite3.connect(database).execute("SELECT checkpoint FROM checkpoints WHERE thread_id = 'planted'").fetchone()
    JsonPlusSerializer().loads_typed(("msgpack", row[0]))
    assert marker.exists()
    marker.unlink()

    store = str(tmp_path / "runs")
    code, out, err = import_langgraph(f"sqlite:///{database}", store, capsys)
    assert code == 1
    assert not marker.exists()  # the importer reads it as data
    problems = [line.removeprefix("  problem: ") for line in err.splitlines() if line.startswith("  problem: ")]
    bad = ["wrong-type", "not-messages", "no-messages", "huge", "deep", "only-the-question", "planted", "garbage",
           "pickled", "7", "city-0"]
    assert sorted(p.split("'")[1] for p in problems) == sorted(bad)  # one line per bad thread, naming it
    why = {p.split("'")[1]: p for p in problems}
    assert "is a str, not a list" in why["wrong-type"] and "messages[0] is a int" in why["not-messages"]
    assert "holds no messages" in why["no-messages"] and f"more than the {MAX_MESSAGES}" in why["huge"]
    assert "nest deeper than 64 levels" in why["deep"] and "no model turn" in why["only-the-question"]
    assert "cannot be read" in why["garbage"] and "cannot be read" in why["city-0"] and "pickle" in why["pickled"]
    assert "not a LangChain message" in why["planted"]
    good = {*SCRIPTS, "rome#2"} - {"city-0"}
    assert out.startswith(f"imported {len(good)} episode(s)") and "11 item(s) skipped" in out
    assert {r["episode_id"] for r in runs_json(store, capsys)} == good


# ----------------------------------------------------------------------------- PostgreSQL
@pytest.fixture
def fresh_database(postgres_dsn: str) -> Iterator[str]:
    """A new, empty database on the suite's PostgreSQL server (the import reads every thread of a database)."""
    from psycopg import Connection

    name = f"import_{uuid.uuid4().hex[:12]}"
    with Connection.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_dsn.rsplit("/", 1)[0] + f"/{name}"
    with Connection.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_postgres_threads_are_imported_into_a_postgres_store(tmp_path: Path, fresh_database: str, capsys):
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(fresh_database) as saver:
        saver.setup()
        run_agent(saver, f"sqlite:///{tmp_path / 'live.db'}")
        with saver._cursor() as cur:  # noqa: SLF001 - plant a garbage blob the way a broken writer would
            cur.execute("UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = 'city-4' AND channel = 'messages'",
                        (b"\xc1" * 32,))

    code, out, err = import_langgraph(fresh_database, fresh_database, capsys)  # the store beside the checkpoints
    assert code == 1 and out.startswith(f"imported {len(SCRIPTS)} episode(s)")
    assert "thread 'city-4'" in err and err.count("problem:") == 1
    live = [b for b in step_bodies(f"sqlite:///{tmp_path / 'live.db'}")]
    imported = step_bodies(fresh_database)
    assert len(imported) == len(live) - 1 and all(episode in live for episode in imported)
    assert {r["episode_id"] for r in runs_json(fresh_database, capsys)} == {*SCRIPTS, "rome#2"} - {"city-4"}


def test_without_the_framework_the_import_names_the_extra_and_the_other_sources_still_work(tmp_path: Path):
    from tests.test_layout import run_without_frameworks

    (tmp_path / "app.db").write_bytes(b"")
    done = run_without_frameworks("""
        import sys
        from adapters.swe_agent import sample_path
        from guardrail.core.cli import main

        code = main(["import", "langgraph", "--checkpointer", "sqlite:///app.db", "-o", "runs"])
        print("langgraph", code)
        print("traj", main(["import", "traj", str(sample_path("swe_agent_v0.traj")), "-o", "runs"]))
        print("loaded", sorted(n for n in ("langgraph", "langchain_core") if sys.modules.get(n) is not None))
    """, tmp_path)
    assert "langgraph 2" in done.stdout and "traj 0" in done.stdout and "loaded []" in done.stdout, done.stderr
    assert "pip install 'guardrail[langgraph]'" in done.stderr


@pytest.mark.fuzz
def test_fuzzed_checkpoint_values_never_raise(tmp_path_factory):
    from hypothesis import assume, given
    from hypothesis import strategies as st

    from guardrail.app.importers import langgraph_episodes
    from guardrail.core.corpus import CorpusIssue
    from guardrail.core.events import Episode
    from tests.fuzzing import FUZZ, json_values, nasty_text

    calls = st.lists(st.fixed_dictionaries({"name": nasty_text, "args": st.dictionaries(nasty_text, json_values,
                                                                                        max_size=3),
                                            "id": nasty_text}), max_size=2)
    messages = st.lists(st.builds(HumanMessage, content=nasty_text)
                        | st.builds(lambda c, t: AIMessage(content=c, tool_calls=t), nasty_text, calls)
                        | json_values, max_size=6)

    @FUZZ
    @given(st.one_of(messages, json_values))
    def check(value: Any) -> None:
        database = tmp_path_factory.mktemp("fuzz") / "app.db"
        with SqliteSaver.from_conn_string(str(database)) as saver:
            try:
                put(saver, "t", {"messages": value})
            except (TypeError, ValueError, UnicodeError):
                assume(False)  # LangGraph itself cannot store it: nothing for an importer to read
        items = list(langgraph_episodes(f"sqlite:///{database}"))
        assert len(items) >= 1 and all(isinstance(item, Episode | CorpusIssue) for item in items)

    check()
