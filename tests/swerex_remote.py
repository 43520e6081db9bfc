"""A real ``swerex-remote`` server on loopback for the tests, started over a workspace and stopped after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

INSTALL = "pip install 'guardrail[swe]' (swe-rex)"


@contextmanager
def swerex_remote(workspace: Path, *, timeout_s: float = 60.0) -> Iterator[Any]:
    """A ``RemoteRuntime`` connected to a ``swerex-remote`` started in `workspace` on 127.0.0.1 (a skip naming the
    install command when swe-rex is missing; a failure when the server does not come up)."""
    pytest.importorskip("swerex", reason=f"swe-rex is not installed: {INSTALL}")
    from traces.bench.sandbox import SwerexUnavailable, swerex_server

    server = swerex_server(workspace, timeout_s=timeout_s)
    try:
        runtime = server.__enter__()
    except SwerexUnavailable as exc:
        pytest.skip(f"{exc} ({INSTALL})")
    try:
        yield runtime
    finally:
        server.__exit__(None, None, None)
