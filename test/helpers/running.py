"""A long-running command (e.g. `embodied-r launch`) started the way a user's shell does,
its output collected line by line, stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path


class Running:
    """A long-running command whose output is collected line by line."""

    def __init__(self, argv: list[str], cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(argv, cwd=cwd, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT,
                                     env=env if env is not None else os.environ.copy())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if needle in line:
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.3)  # the reader thread may still hold the last lines
                for line in list(self.lines):
                    if needle in line:
                        return line
                raise AssertionError(f"exited ({self.proc.returncode}) without {needle!r}:\n"
                                     + self.text()[-4000:])
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} within {timeout_s} s:\n" + self.text()[-4000:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode
