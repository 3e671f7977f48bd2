"""README command 1 (the demo) and the rosbag replay evaluator, run as a user would:
through their `main()` (or the installed command) with real node processes, real DDS,
real bags written by rosbags and tiny local models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from embodied_r_ros import demo, replay_eval
from embodied_r_ros.sample_data.cli import main as make_sample

from helpers.env import REPO_ROOT, fresh_ros_domain


def _link_tiny(tmp_path: Path, tiny_models) -> Path:  # type: ignore[no-untyped-def]
    """An artifacts folder whose tiny_models are the session's (no second build)."""
    (tmp_path / "tiny_models").symlink_to(Path(tiny_models.vlm).parent, target_is_directory=True)
    return tmp_path


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_demo_runs_the_whole_graph_on_the_sample(tmp_path: Path, tiny_models, capsys) -> None:  # type: ignore[no-untyped-def]
    _link_tiny(tmp_path, tiny_models)
    fresh_ros_domain()
    # As `make demo`, with tiny random models in place of the shipped mini-world ones
    # (test_mini_world_accuracy.py runs the demo's default models).
    code = demo.main(["--artifacts", str(tmp_path), "--quiet-nodes", "--tiny-models"])
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
    assert report["episode"]["keyframes"][0]["reason"] == "first"
    # The demo's replay is lossless by default: every frame of the sample reaches the graph.
    assert report["episode"]["frames_received"] == report["episode"]["frames_published"] == 321
    # Issue 25: codes by name, why the answers are noise, the picture, what to try next.
    if any(not q["success"] for q in report["questions"]):
        assert "FAILED UNPARSEABLE_ANSWER (code 9)" in out and "FAILED code" not in out
    assert "why the answers are noise" in out and "preview.png" in out
    assert "== next, from the repository root" in out
    assert "embodied-r launch models:=tiny_cpu perception_model:=" in out  # tmp artifacts
    assert "embodied-r play " in out and "embodied-r replay-eval " in out


def test_demo_fills_in_only_the_missing_model(tmp_path: Path, tiny_models) -> None:  # type: ignore[no-untyped-def]
    _link_tiny(tmp_path, tiny_models)
    args = demo.parse_args(["--artifacts", str(tmp_path), "--reasoning-model", "/models/real-lm",
                            "--tiny-models"])
    overrides, tiny = demo.resolve_models(args)
    assert tiny is True
    assert overrides["reasoning.model"] == "/models/real-lm"
    assert not any(k.startswith("reasoning.") and k != "reasoning.model" for k in overrides)
    assert overrides["perception.model"] == str(tiny_models.vlm)
    assert overrides["perception.device"] == "cpu"
    both = demo.parse_args(["--artifacts", str(tmp_path), "--perception-model", "/a",
                            "--reasoning-model", "/b"])
    assert demo.resolve_models(both) == ({"perception.model": "/a", "reasoning.model": "/b"}, False)


def test_fast_and_live_modes_agree_on_the_sample(sample_dir: Path, tmp_path: Path, tiny_models,
                                                 capsys) -> None:  # type: ignore[no-untyped-def]
    """Greedy tiny models: the same key frames, descriptions, reasoning prompts and
    answers in one process as through the node graph over DDS (lossless reliable QoS)."""
    art = _link_tiny(tmp_path, tiny_models)
    common = ["--bag", str(sample_dir / "sample.mcap"), "--questions",
              str(sample_dir / "questions.json"), "--tiny-models", "--artifacts", str(art)]
    fast_out, live_out = tmp_path / "fast" / "eval.json", tmp_path / "live" / "eval.json"
    assert replay_eval.main([*common, "--mode", "fast", "--out", str(fast_out)]) == 0
    fresh_ros_domain()
    assert replay_eval.main([*common, "--mode", "live", "--quiet-nodes", "--rate", "4",
                             "--set", "camera.reliability=reliable", "--set", "camera.depth=50",
                             "--out", str(live_out)]) == 0, capsys.readouterr().out[-3000:]

    fast_ep, = _jsonl(fast_out.with_suffix(".episodes.jsonl"))
    live_ep, = _jsonl(live_out.with_suffix(".episodes.jsonl"))
    assert live_ep["frames_received"] == live_ep["frames_published"] == fast_ep["frames_published"] == 321

    def keyframes(ep):  # type: ignore[no-untyped-def]
        return [(k["index"], k["sampled_index"], k["source_index"], round(k["stamp_s"], 6),
                 k["reason"], round(k["overlap"], 4)) for k in ep["keyframes"]]

    assert len(keyframes(fast_ep)) >= 4
    assert keyframes(fast_ep) == keyframes(live_ep)
    assert keyframes(fast_ep)[-1][4] == "forced"  # the current view when asked (§2)
    assert ([d["raw_text"] for d in fast_ep["descriptions"]]
            == [d["raw_text"] for d in live_ep["descriptions"]])
    assert len(fast_ep["descriptions"]) == len(fast_ep["keyframes"])

    fast = {r["question_id"]: r for r in _jsonl(fast_out.with_suffix(".results.jsonl"))}
    live = {r["question_id"]: r for r in _jsonl(live_out.with_suffix(".results.jsonl"))}
    questions = json.loads((sample_dir / "questions.json").read_text())
    assert sorted(fast) == sorted(live) == sorted(q["Question_id"] for q in questions)
    for qid, a in fast.items():
        b = live[qid]
        assert a["mode"] == "fast" and b["mode"] == "live"
        assert a["prompt"] and a["prompt"] == b["prompt"], qid  # the exact reasoning input
        assert a["prompt"][1]["content"].count("Frame ") >= 4
        for key in ("raw_output", "answer", "success", "error_code", "keyframes_used", "correct"):
            assert a[key] == b[key], (qid, key)
    # Both runs wrote the summary, the markdown table and the plot.
    for out in (fast_out, live_out):
        summary = json.loads(out.read_text())
        assert summary["questions"] == len(questions) and "average" in summary["accuracy"]
        assert set(summary["latency_per_stage"]) == {"perception_s", "reasoning_s", "total_s"}
        assert "| category | questions | accuracy % |" in out.with_suffix(".md").read_text()
        assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Running again resumes: nothing left to ask, no model loaded.
    capsys.readouterr()
    assert replay_eval.main([*common, "--mode", "fast", "--out", str(fast_out)]) == 0
    assert f"{len(questions)} already answered" in capsys.readouterr().out
    assert len(_jsonl(fast_out.with_suffix(".results.jsonl"))) == len(questions)
    # Another mode on the same results is refused (never mixes modes in one file).
    assert replay_eval.main([*common, "--mode", "live", "--out", str(fast_out)]) == 2


def test_folder_of_bags_each_its_own_episode(tmp_path: Path, tiny_models, capsys) -> None:  # type: ignore[no-untyped-def]
    art = _link_tiny(tmp_path, tiny_models)
    bags = tmp_path / "bags"
    assert make_sample([str(bags / "raw"), "--fps", "2"]) == 0
    assert make_sample([str(bags / "day2"), "--fps", "2", "--storage", "sqlite3", "--compressed",
                        "--seed", "1"]) == 0
    records = []
    for folder, bag in (("raw", "raw/sample.mcap"), ("day2", "day2/sample.db3")):
        for rec in json.loads((bags / folder / "questions.json").read_text())[:2]:
            records.append({**rec, "Question_id": f"{folder}-{rec['Question_id']}", "bag": bag})
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "eval" / "folder.json"
    argv = ["--bag", str(bags), "--questions", str(qfile), "--mode", "fast", "--tiny-models",
            "--artifacts", str(art), "--set", "perception.max_new_tokens=4", "--out", str(out)]
    assert replay_eval.main(argv) == 0, capsys.readouterr().out[-2000:]
    episodes = {e["bag"]: e for e in _jsonl(out.with_suffix(".episodes.jsonl"))}
    assert set(episodes) == {"raw/sample.mcap", "day2/sample.db3"}
    assert episodes["raw/sample.mcap"]["read"]["msgtype"] == "sensor_msgs/msg/Image"
    assert episodes["day2/sample.db3"]["read"]["msgtype"] == "sensor_msgs/msg/CompressedImage"
    assert episodes["raw/sample.mcap"]["episode_id"] != episodes["day2/sample.db3"]["episode_id"]
    for ep in episodes.values():  # reset between bags: each episode starts from key frame 0
        assert ep["keyframes"][0]["index"] == 0 and ep["keyframes"][0]["reason"] == "first"
        assert ep["frames_published"] == 65
    results = _jsonl(out.with_suffix(".results.jsonl"))
    assert sorted(r["question_id"] for r in results) == sorted(r["Question_id"] for r in records)
    for r in results:
        assert r["bag"] == ("raw/sample.mcap" if r["question_id"].startswith("raw-") else "day2/sample.db3")
        assert r["episode_id"] == episodes[r["bag"]]["episode_id"]
    summary = json.loads(out.read_text())
    assert summary["bags"] == 2 and summary["questions"] == 4

    # Two bags at once on two processes: the same episodes and answers.
    par = tmp_path / "eval" / "parallel.json"
    assert replay_eval.main([*argv[:-1], str(par), "--jobs", "2"]) == 0
    assert "on 2 processes" in capsys.readouterr().out
    par_results = {r["question_id"]: r for r in _jsonl(par.with_suffix(".results.jsonl"))}
    for r in results:
        assert par_results[r["question_id"]]["raw_output"] == r["raw_output"]
        assert par_results[r["question_id"]]["prompt"] == r["prompt"]
    par_episodes = {e["bag"]: e for e in _jsonl(par.with_suffix(".episodes.jsonl"))}
    assert ({b: e["keyframes"] for b, e in par_episodes.items()}
            == {b: e["keyframes"] for b, e in episodes.items()})

    # Two "machines", one shard each (split by bag), merged by --report-only.
    sharded = tmp_path / "eval" / "sharded.json"
    for i in range(2):
        assert replay_eval.main([*argv[:-1], str(sharded), "--shard", f"{i}/2"]) == 0
    assert not sharded.exists()  # each shard wrote its own summary
    shard_summaries = [json.loads(sharded.with_name(f"sharded.shard{i}of2.json").read_text())
                       for i in range(2)]
    assert sorted(s["bags"] for s in shard_summaries) in ([0, 2], [1, 1])
    assert replay_eval.main(["--report-only", "--out", str(sharded)]) == 0
    merged = json.loads(sharded.read_text())
    assert merged["questions"] == 4 and merged["bags"] == 2
    assert ({r["question_id"]: r["raw_output"] for r in merged["results"]}
            == {r["question_id"]: r["raw_output"] for r in results})
    assert sharded.with_suffix(".png").exists() and sharded.with_suffix(".md").exists()

    # A name matching two bags by stem ("sample") is refused, naming both.
    ambiguous = tmp_path / "ambiguous.json"
    ambiguous.write_text(json.dumps([{**records[0], "bag": "", "video_id": "sample.mp4"}]))
    capsys.readouterr()
    assert replay_eval.main([*argv[:2], "--questions", str(ambiguous), *argv[4:-1],
                             str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "matches several bags" in err and "raw/sample.mcap" in err and "day2/sample.db3" in err


def test_killed_run_resumes_without_asking_a_question_twice(tmp_path: Path, tiny_models,
                                                            monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    art = _link_tiny(tmp_path, tiny_models)
    assert make_sample([str(tmp_path / "s"), "--fps", "2"]) == 0
    base = json.loads((tmp_path / "s" / "questions.json").read_text())
    records = [{**r, "Question_id": f"{r['Question_id']}-{k}"} for k in range(5) for r in base]
    qfile = tmp_path / "many.json"
    qfile.write_text(json.dumps(records))
    out = tmp_path / "eval" / "run.json"
    argv = ["replay-eval", "--bag", str(tmp_path / "s" / "sample.mcap"), "--questions", str(qfile),
            "--mode", "fast", "--tiny-models", "--artifacts", str(art),
            "--set", "perception.max_new_tokens=4", "--out", str(out)]
    results = out.with_suffix(".results.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "embodied_r_ros.cli", *argv], cwd=REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ))
    try:
        deadline = time.monotonic() + 240
        while not (results.exists() and results.read_text().count("\n") >= 3):
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no results appeared"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    stored = {r["question_id"] for r in _jsonl(results)}
    assert 3 <= len(stored) < len(records), "the kill came too late to test resuming"

    from embodied_r_ros.core.pipeline import EmbodiedRPipeline

    asked: list[str] = []
    original = EmbodiedRPipeline.ask

    def counting_ask(self, question, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(question)
        return original(self, question, *args, **kwargs)

    monkeypatch.setattr(EmbodiedRPipeline, "ask", counting_ask)
    capsys.readouterr()
    from embodied_r_ros.cli import main as cli_main

    assert cli_main(argv) == 0
    assert f"{len(stored)} already answered" in capsys.readouterr().out
    assert len(asked) == len(records) - len(stored)  # nothing finished was asked again
    rows = _jsonl(results)
    ids = [r["question_id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(records)  # every question answered exactly once
    assert json.loads(out.read_text())["questions"] == len(records)
