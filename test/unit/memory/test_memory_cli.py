"""The real `embodied-r memory` commands on real files: import a long episode, select
(recall of the one stretch an object is seen in), search, export JSONL + HTML, stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from bench.bench_memory import questions_for, synthetic_episode
from embodied_r_ros.core.memory.long_term import make_thumbnail
from embodied_r_ros.core.memory.store import MemoryStore, QuestionRecord

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
EXE = Path(sys.executable).parent / "embodied-r"


def memory(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    command = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "embodied_r_ros.cli"]
    proc = subprocess.run([*command, "memory", *args], capture_output=True, text=True, env=env,
                          timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def write_jsonl(path: Path, episode_records: list, extra: list[str] = ()) -> None:  # type: ignore[assignment]
    lines = []
    for r in episode_records:
        obj = r.to_json()
        obj.pop("has_thumbnail")
        lines.append(json.dumps(obj))
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")


def test_import_then_select_finds_the_stretch_of_each_object(tmp_path: Path) -> None:
    episode = synthetic_episode(3000, 150, seed=11, episode_id="drive")
    jsonl, db = tmp_path / "drive.jsonl", tmp_path / "robot.sqlite"
    write_jsonl(jsonl, episode.records, extra=['{"episode_id": "drive"}', "not json"])
    proc = memory("import", str(jsonl), "--db", str(db), check=False)
    assert proc.returncode == 1  # the two bad lines are reported, the rest imported
    assert "imported 3000 key frame(s)" in proc.stdout
    assert "drive.jsonl:3001: missing field 'keyframe_index'" in proc.stderr
    assert "drive.jsonl:3002:" in proc.stderr
    questions = questions_for(episode, 12, seed=2)
    hits = {"relevant": 0, "even": 0}
    for text, needed in questions:
        for mode in hits:
            out = json.loads(memory("select", str(db), "--question", text, "--max", "32",
                                    "--mode", mode, "--episode", "drive", "--json").stdout)
            chosen = [f["keyframe_index"] for f in out["keyframes"]]
            assert len(chosen) == 32 and chosen == sorted(chosen) and out["total"] == 3000
            hits[mode] += bool(set(chosen) & set(needed))
    assert hits["relevant"] >= 11, hits
    assert hits["even"] <= 3, hits
    # --now moves "now": ages are measured from it.
    out = json.loads(memory("select", str(db), "--episode", "drive", "--question", "where am I",
                            "--now", str(episode.records[-1].stamp_s + 600), "--json").stdout)
    assert out["keyframes"][-1]["age"] == "10 min"
    assert out["keyframes"][0]["pose"] == {"x": 0.0, "y": 0.0, "z": 0.0, "yaw": 0.0,
                                            "frame_id": "odom"}


def test_search_export_html_and_stats(tmp_path: Path) -> None:
    from bench.bench_memory import synthetic_image

    episode = synthetic_episode(120, 10, seed=4, episode_id="walk")
    db = tmp_path / "robot.sqlite"
    store = MemoryStore(db, background=False)
    for r in episode.records[:40]:
        r.thumbnail = make_thumbnail(synthetic_image(r.keyframe_index), 160)
    store.write_many(episode.records)
    store.set_current_episode("walk")
    name, stretch = next(iter(episode.stretches.items()))
    store.add_question(QuestionRecord("walk", f"Where did I see the {name}?", [], "by the door",
                                      True, [{"keyframe_index": stretch[0], "named": True}]))
    store.close()

    found = json.loads(memory("search", str(db), name, "--k", "3", "--json",
                              "--thumbnails").stdout)
    assert found["results"] and found["results"][0]["keyframe_index"] in stretch
    assert found["results"][0]["pose"]["frame_id"] == "odom"
    assert "stamp_s" in found["results"][0]

    html_path, jsonl = tmp_path / "walk.html", tmp_path / "walk.jsonl"
    memory("export", str(db), "--episode", "walk", "--out", str(jsonl), "--html", str(html_path))
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [x["keyframe_index"] for x in lines] == list(range(120))
    assert lines[0]["has_thumbnail"] and not lines[100]["has_thumbnail"]

    class Page(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.frames: list[str] = []
            self.images = 0
            self.questions = 0
            self.text: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if tag == "div" and a.get("class") == "kf":
                self.frames.append(a.get("data-index") or "")
            if tag == "img" and (a.get("src") or "").startswith("data:image/jpeg;base64,"):
                self.images += 1
            if tag == "tr" and a.get("class") == "question":
                self.questions += 1

        def handle_data(self, data: str) -> None:
            self.text.append(data)

    page = Page()
    page.feed(html_path.read_text())
    assert page.frames == [str(i) for i in range(120)]
    assert page.images == 40 and page.questions == 1
    body = " ".join(page.text)
    assert f"Where did I see the {name}?" in body and episode.records[7].observation in body

    # Re-import the export into another store: the same key frames.
    other = tmp_path / "other.sqlite"
    memory("import", str(jsonl), "--db", str(other))
    stats = json.loads(memory("stats", str(other), "--json").stdout)
    assert stats["keyframes"] == 120 and stats["with_pose"] == 120
    text = memory("stats", str(db)).stdout
    assert "120 key frame(s)" in text and "40 with thumbnail" in text and "1 question(s)" in text

    missing = memory("stats", str(tmp_path / "nope.sqlite"), check=False)
    assert missing.returncode == 1 and "no memory store at" in missing.stderr
