"""`guardrail inspect CORPUS...`: what a corpus holds and every problem found reading it."""

from __future__ import annotations

import argparse

from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.corpus import CorpusError, read_corpus


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="+", help="corpus directories (guardrail or sentinel format)")
    parser.add_argument("--json", action="store_true", help="one JSON object per corpus")
    parser.add_argument("--no-verify", action="store_true", help="skip sha256 verification")


def _run(args: argparse.Namespace) -> int:
    status = 0
    rows = []
    for path in args.corpus:
        try:
            corpus = read_corpus(path, verify=not args.no_verify)
        except CorpusError as exc:
            status = 1
            if args.json:
                emit_json({"corpus": path, "error": str(exc)})
            else:
                print(f"error: {exc}")
            continue
        labels = corpus.labels()
        record = {
            "corpus": corpus.name,
            "path": str(corpus.path),
            "format": corpus.kind,
            "episodes": len(corpus.episodes),
            "steps": corpus.n_steps,
            "labels": labels,
            "rejected": len(corpus.rejected),
            "issues": [str(i) for i in corpus.issues],
        }
        if corpus.issues:
            status = 1
        if args.json:
            emit_json(record)
        else:
            rows.append({k: record[k] for k in ("corpus", "format", "episodes", "steps", "rejected")}
                        | {"issues": len(corpus.issues),
                           "labels": ", ".join(f"{k}={v}" for k, v in labels.items())})
            for issue in corpus.issues[:20]:
                print(f"  problem: {issue}")
    if rows:
        print_table(rows)
    return status


INSPECT = Command(help="list a corpus's episodes, labels and any corrupt lines", add_arguments=_add, run=_run)
