"""Real servers for tests: a `transformers serve` process (the OpenAI-compatible server
that ships with transformers) pinned to a local model folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def transformers_serve(model: str, log_dir: Path,
                       port: int | None = None) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """(process, base_url) of `transformers serve MODEL` on 127.0.0.1, ready to answer."""
    exe = Path(sys.executable).parent / "transformers"
    if not exe.exists():
        pytest.fail(f"`transformers` command not found next to {sys.executable}")
    port = port or free_port()
    log_path = log_dir / f"serve_{port}.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(exe), "serve", model, "--host", "127.0.0.1", "--port", str(port),
             "--device", "cpu"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.3)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(18)  # SIGCONT, in case a test left it stopped
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
