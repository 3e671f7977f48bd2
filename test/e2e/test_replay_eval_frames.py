"""Replay evaluation says what it replayed (issue 25, items 3 and 8): frames received of
sent per bag in every output, a lossy run marked as such, lossless live replay by
default, `source_index` the bag's frame index in both modes, and reports that name the
models, say when every answer of a category failed, and count bags correctly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.env import fresh_ros_domain


def command(*args: str) -> list[str]:
    script = shutil.which("embodied-r")
    return [script, *args] if script else [sys.executable, "-m", "embodied_r_ros.cli", *args]


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())


def _jsonl(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _artifacts(tmp_path: Path, tiny_models) -> Path:  # type: ignore[no-untyped-def]
    art = tmp_path / "art"
    art.mkdir()
    (art / "tiny_models").symlink_to(Path(tiny_models.vlm).parent, target_is_directory=True)
    return art


@pytest.mark.slow
@pytest.mark.models
def test_live_replay_is_lossless_by_default_and_says_so(sample_dir: Path, tmp_path: Path,
                                                        tiny_models) -> None:  # type: ignore[no-untyped-def]
    art = _artifacts(tmp_path, tiny_models)
    questions = json.loads((sample_dir / "questions.json").read_text())[:1]
    qfile = tmp_path / "one_question.json"
    qfile.write_text(json.dumps(questions))
    common = ["--bag", str(sample_dir / "sample.mcap"), "--questions", str(qfile),
              "--tiny-models", "--artifacts", str(art)]
    fresh_ros_domain()
    live_out = tmp_path / "live" / "eval.json"
    live = run("replay-eval", *common, "--mode", "live", "--quiet-nodes", "--out", str(live_out))
    assert live.returncode == 0, (live.stdout + live.stderr)[-4000:]
    fast_out = tmp_path / "fast" / "eval.json"
    fast = run("replay-eval", *common, "--mode", "fast", "--out", str(fast_out))
    assert fast.returncode == 0, (fast.stdout + fast.stderr)[-4000:]

    summary = json.loads(live_out.read_text())
    assert summary["setup"]["camera_reliability"] == "reliable"  # the evaluation default
    frames = summary["frames"]["sample.mcap"]
    assert frames["sent"] == frames["received"] == 321 and not frames["lossy"]
    assert summary["lossy_bags"] == []
    md = live_out.with_suffix(".md").read_text()
    assert "Frames: received 321 of 321 sent" in md and "LOSSY" not in md
    assert "(1 bag)" in md and "TINY RANDOM MODELS" in md

    # source_index is the bag's frame index in both modes
    (live_ep,) = _jsonl(live_out.with_suffix(".episodes.jsonl"))
    (fast_ep,) = _jsonl(fast_out.with_suffix(".episodes.jsonl"))
    assert [(k["source_index"], k["sampled_index"]) for k in live_ep["keyframes"]] == \
        [(k["source_index"], k["sampled_index"]) for k in fast_ep["keyframes"]]
    # every answer of the tiny models failed: the table says so beside the 0 %
    if all(not r["success"] for r in summary["results"]):
        assert "all failed: 1 UNPARSEABLE_ANSWER" in md
    assert all(r["error_name"] for r in summary["results"])


def test_a_lossy_run_is_marked_in_every_output(tmp_path: Path) -> None:
    """What a live run with the robot's QoS leaves when frames were lost (271 of 321 as
    seen), summarised again by the documented `--report-only`."""
    out = tmp_path / "eval.json"
    result = {"question_id": "q1", "bag": "walk.mcap", "category": "", "question": "Left or right?",
              "choices": ["left", "right"], "ground_truth": "A", "success": False,
              "error_code": 9, "message": "no option letter", "correct": False, "mode": "live"}
    episode = {"bag": "walk.mcap", "mode": "live", "episode_id": "e1", "read": {"warnings": []},
               "frames_published": 321, "frames_received": 271, "keyframes": [],
               "descriptions": []}
    setup = {"mode": "live", "perception_model": "/m/tiny_models/vlm",
             "reasoning_model": "/m/tiny_models/lm", "tiny_models": True}
    out.with_suffix(".results.jsonl").write_text(json.dumps(result) + "\n")
    out.with_suffix(".episodes.jsonl").write_text(json.dumps(episode) + "\n")
    out.with_suffix(".run.json").write_text(json.dumps(setup))
    done = run("replay-eval", "--report-only", "--out", str(out), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = json.loads(out.read_text())
    assert summary["frames"]["walk.mcap"] == {"sent": 321, "received": 271, "lost": 50,
                                              "lossy": True, "mode": "live"}
    assert summary["lossy_bags"] == ["walk.mcap"]
    md = out.with_suffix(".md").read_text()
    assert "LOSSY `walk.mcap`: received 271 of 321 frames (50 lost)" in md
    assert "| (no category) |" in md and "| all |" not in md
    assert "all failed: 1 UNPARSEABLE_ANSWER" in md
    assert "Models: perception vlm, reasoning lm (TINY RANDOM MODELS" in md
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
