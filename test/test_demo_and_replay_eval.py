"""README command 1 (the demo) and the rosbag replay evaluator, run as a user would:
through their `main()` with real node processes, real DDS and tiny local models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="needs the ROS 2 wheels (make setup)")

from conftest import fresh_ros_domain  # noqa: E402

from embodied_r_ros import demo, replay_eval  # noqa: E402
from embodied_r_ros.sample_data.cli import main as make_sample  # noqa: E402


def test_demo_runs_the_whole_graph_on_the_sample(tmp_path: Path, tiny_models, capsys) -> None:  # type: ignore[no-untyped-def]
    # Reuse the session's tiny models (the demo would otherwise build its own copy).
    (tmp_path / "tiny_models").symlink_to(Path(tiny_models.vlm).parent, target_is_directory=True)
    fresh_ros_domain()
    code = demo.main(["--artifacts", str(tmp_path), "--quiet-nodes", "--rate", "8"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "NO PERCEPTION AND REASONING MODEL CONFIGURED" in out and "MEANINGLESS" in out
    for heading in ("== key frames chosen", "== frame descriptions", "== answers",
                    "latency: perception wait"):
        assert heading in out
    report = json.loads((tmp_path / "demo_report.json").read_text())
    assert report["tiny_models"] is True
    questions = json.loads((tmp_path / "sample" / "questions.json").read_text())
    assert len(report["questions"]) == len(questions) >= 5
    assert all(q["keyframes_used"] >= 4 for q in report["questions"])
    assert all(q["success"] or q["error_code"] == 9 for q in report["questions"])


def test_replay_eval_on_a_compressed_sqlite3_bag(tmp_path: Path, tiny_models, capsys) -> None:  # type: ignore[no-untyped-def]
    sample = tmp_path / "bag_sample"
    assert make_sample([str(sample), "--storage", "sqlite3", "--compressed"]) == 0
    bags = [p for p in sample.iterdir() if p.is_dir() or p.suffix in {".db3", ".mcap"}]
    assert bags, list(sample.iterdir())
    out = tmp_path / "eval" / "result.json"
    fresh_ros_domain()
    code = replay_eval.main([
        "--bag", str(bags[0]), "--questions", str(sample / "questions.json"),
        "--perception-model", str(tiny_models.vlm), "--reasoning-model", str(tiny_models.lm),
        "--artifacts", str(tmp_path), "--quiet-nodes", "--rate", "0", "--out", str(out)])
    assert code == 0, capsys.readouterr().out[-3000:]
    result = json.loads(out.read_text())
    assert "average" in result["accuracy"]
    assert set(result["latency"]) >= {"total_s_median", "reasoning_s_median"}
    assert "| category | accuracy % |" in out.with_suffix(".md").read_text()
    assert replay_eval.main(["--quiet-nodes"]) == 2  # --bag/--questions required


def test_demo_fills_in_only_the_missing_model(tmp_path: Path, tiny_models) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "tiny_models").symlink_to(Path(tiny_models.vlm).parent, target_is_directory=True)
    args = demo.parse_args(["--artifacts", str(tmp_path), "--reasoning-model", "/models/real-lm"])
    overrides, tiny = demo.resolve_models(args)
    assert tiny is True
    assert overrides["reasoning.model"] == "/models/real-lm"
    assert not any(k.startswith("reasoning.") and k != "reasoning.model" for k in overrides)
    assert overrides["perception.model"] == str(tiny_models.vlm)
    assert overrides["perception.device"] == "cpu"
    both = demo.parse_args(["--artifacts", str(tmp_path), "--perception-model", "/a",
                            "--reasoning-model", "/b"])
    assert demo.resolve_models(both) == ({"perception.model": "/a", "reasoning.model": "/b"}, False)
