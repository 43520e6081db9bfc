"""A real ``swerex-remote`` server on loopback for the tests, started over a workspace and stopped after."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

INSTALL = "pip install 'guardrail[swe]' (swe-rex)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def swerex_remote(workspace: Path, *, timeout_s: float = 60.0) -> Iterator[Any]:
    """A ``RemoteRuntime`` connected to a ``swerex-remote`` started in `workspace` on 127.0.0.1."""
    pytest.importorskip("swerex", reason=f"swe-rex is not installed: {INSTALL}")
    from swerex.runtime.remote import RemoteRuntime

    server = shutil.which("swerex-remote", path=os.path.dirname(sys.executable)) or shutil.which("swerex-remote")
    if server is None:
        pytest.skip(f"no swerex-remote executable: {INSTALL}")
    port, token = _free_port(), secrets.token_hex(8)
    log = tempfile.TemporaryFile()  # a file, not a pipe: uvicorn logs every request and a full pipe would stall it
    process = subprocess.Popen([server, "--host", "127.0.0.1", "--port", str(port), "--auth-token", token],
                               cwd=workspace, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    runtime = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token, timeout=30)
    try:
        try:
            asyncio.run(runtime.wait_until_alive(timeout=timeout_s))
        except Exception as exc:  # noqa: BLE001 - say why the server did not come up
            process.kill()
            process.wait(timeout=10)
            log.seek(0)
            err = log.read().decode(errors="replace")[-800:]
            raise RuntimeError(f"swerex-remote did not come up on port {port}: {exc}\n{err}") from exc
        yield runtime
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        log.close()
