"""Append-only JSON-lines files: the crash-safe store behind every resumable run.

Used by the training perception cache and evaluation, and by replay evaluation. Each
`append_many` writes whole lines, then flushes and fsyncs, so a finished item is on disk
before the next begins; reading skips a trailing partial line left by a killed writer,
and the next append first ends that line so it stays unreadable on its own (its work is
redone once, never twice).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

LOG = logging.getLogger("embodied_r_ros.append_only")


class AppendOnlyJsonl:
    """A JSONL file that only grows (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                if not line.endswith("\n"):
                    break  # cut short by a crash: the work it held is redone
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    LOG.warning("%s: skipping an unreadable line", self.path)
        return rows

    def append_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        payload = "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows)
        if not payload:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() > 0:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")  # end the partial line so it stays unreadable alone
            handle.write(payload.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())

    def append(self, row: Mapping[str, Any]) -> None:
        self.append_many([row])


def write_json_atomic(path: str | Path, value: Any) -> Path:
    """Write one JSON document through a temporary file and a rename: readers never see
    half a file, and a failed write leaves no temporary file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(value, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
