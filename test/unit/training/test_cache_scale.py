"""Perception caching and evaluation at scale: key frames on a process pool, shards on
several "machines" merged by copying their files, resumable evaluation. Real toy
benchmark files (`toy-data`), real mp4 clips and the tiny VLM / LM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.shards import Shard, parse_shard, shard_of
from embodied_r_training import data
from embodied_r_training.cli import main as train_cli
from embodied_r_training.perception_cache import cache_split
from embodied_r_training.toy import make_published_tree


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    toy = make_published_tree(root / "download", vsi_scenes=3, seed=2)
    data.prepare(vsi=[toy["vsi_parquet"]], urban=[toy["urban"]], out=root / "prep", seed=0,
                 ratios=(1, 0, 0))
    records = data.read_jsonl(root / "prep" / "train.jsonl")
    # One question per video keeps the VLM work small; every video is still decoded.
    first: dict[str, dict] = {}
    for r in records:
        first.setdefault(r["video_path"], r)
    subset = list(first.values())
    data.write_jsonl_atomic(root / "subset" / "train.jsonl", subset)
    return root, subset


def _cache_cli(prepared, tiny_models, out: Path, *extra: str) -> dict:
    root, _ = prepared
    argv = ["cache-perception", "--config", "perception_tiny.yaml", "--data", str(root / "subset"),
            "--split", "train", "--out", str(out), "--mode", "streaming", "--no-progress",
            "--set", f"perception_model.model={tiny_models.vlm}",
            "--set", "perception_model.max_new_tokens=4", "--set", "keyframes.max_keyframes=4",
            *extra]
    code = train_cli(argv)
    summaries = sorted(out.glob("train.streaming*.summary.json"))
    summary = json.loads(summaries[-1].read_text())
    summary["exit_code"] = code
    return summary


def test_shard_split_is_by_name_only():
    names = [f"scannet/scene{i:04d}_00.mp4" for i in range(200)]
    shards = [Shard(i, 4) for i in range(4)]
    owners = [[s.index for s in shards if s.owns(n)] for n in names]
    assert all(len(o) == 1 for o in owners)  # a partition
    sizes = [sum(1 for o in owners if o == [i]) for i in range(4)]
    assert min(sizes) > 30  # roughly balanced
    # The same name lands on the same shard whatever else is there or in which order.
    assert [shard_of(n, 4) for n in reversed(names)] == [o[0] for o in reversed(owners)]
    assert parse_shard("1/4") == Shard(1, 4) and Shard(1, 4).suffix == ".shard1of4"
    assert Shard(0, 1).suffix == "" and Shard(0, 1).owns("anything")
    for bad in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(InvalidRequestError):
            parse_shard(bad)


def test_pool_of_workers_gives_the_same_cache_as_one_process(prepared, tiny_models, tmp_path):
    _, subset = prepared
    one = _cache_cli(prepared, tiny_models, tmp_path / "one", "--workers", "1")
    two = _cache_cli(prepared, tiny_models, tmp_path / "two", "--workers", "2")
    assert one["exit_code"] == two["exit_code"] == 0
    assert one["videos"] == two["videos"] == len(subset) >= 6
    assert two["complete"] and two["records_written"] == len(subset)
    a = data.read_jsonl(tmp_path / "one" / "train.streaming.jsonl")
    b = data.read_jsonl(tmp_path / "two" / "train.streaming.jsonl")
    assert [r["keyframes"] for r in a] == [r["keyframes"] for r in b]
    assert [r["video_text"] for r in a] == [r["video_text"] for r in b]  # greedy tiny VLM

    # Zip members were extracted by the workers and removed again.
    assert two["videos_extracted"] == sum(1 for r in subset if r["video"].get("member"))
    assert not list((tmp_path / "two" / ".videos").rglob("*.mp4"))


def test_shards_on_two_machines_merge_by_copying(prepared, tiny_models, tmp_path):
    _, subset = prepared
    machines = [tmp_path / "machine0", tmp_path / "machine1"]
    shard_videos = []
    for i, out in enumerate(machines):
        summary = _cache_cli(prepared, tiny_models, out, "--shard", f"{i}/2", "--workers", "2")
        assert summary["exit_code"] == 0 and summary["shard"] == f"{i}/2"
        assert not summary["complete"] or summary["videos"] == len(subset)
        rows = [json.loads(line) for line in (out / f"keyframes.shard{i}of2.jsonl").read_text().splitlines()]
        shard_videos.append({r["video"] for r in rows})
        assert (out / f"train.streaming.shard{i}of2.summary.json").exists()
    assert shard_videos[0].isdisjoint(shard_videos[1])
    assert shard_videos[0] | shard_videos[1] == {r["video_path"] for r in subset}

    merged = tmp_path / "merged"
    merged.mkdir()
    for out in machines:
        for f in out.glob("*.shard*of2.jsonl"):
            shutil.copy(f, merged / f.name)

    def no_model():  # the final run must find everything described
        raise AssertionError("the merge run loaded the perception model")

    stats = cache_split(subset, perceiver=no_model, out=merged, split="train", mode="streaming",
                        progress=False)
    assert stats.complete and stats.records_written == len(subset)
    assert stats.videos_skipped == len(subset) and stats.model_calls == 0
    single = _cache_cli(prepared, tiny_models, tmp_path / "single", "--workers", "2")
    assert single["complete"]
    a = data.read_jsonl(merged / "train.streaming.jsonl")
    b = data.read_jsonl(tmp_path / "single" / "train.streaming.jsonl")
    assert [r["video_text"] for r in a] == [r["video_text"] for r in b]


def _eval_cli(records: Path, out: Path, tiny_models, *extra: str) -> int:
    return train_cli(["evaluate", "--config", "eval_tiny.yaml", "--records", str(records),
                      "--out", str(out), "--no-progress",
                      "--set", f"reasoning_model.model={tiny_models.lm}",
                      "--set", "reasoning_model.max_new_tokens=8", "--set", "consistency_model=null",
                      *extra])


def test_evaluation_shards_resume_and_merge(prepared, tiny_models, tmp_path, monkeypatch):
    root, subset = prepared
    cache = tmp_path / "cache"
    assert _cache_cli(prepared, tiny_models, cache, "--workers", "1")["complete"]
    records = cache / "train.streaming.jsonl"
    whole = tmp_path / "whole"
    assert _eval_cli(records, whole, tiny_models) == 0
    expected = json.loads((whole / "metrics.json").read_text())

    # Two shards, the second one killed after its first batch and resumed.
    out = tmp_path / "sharded"
    assert _eval_cli(records, out, tiny_models, "--shard", "0/2") == 0
    from embodied_r_ros.core.backends import transformers_backend

    calls = {"n": 0}
    real = transformers_backend.TransformersReasoner.generate_batch

    def dying(self, prompts, settings=None):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 1:
            raise KeyboardInterrupt  # as if the run were stopped here
        return real(self, prompts, settings)

    monkeypatch.setattr(transformers_backend.TransformersReasoner, "generate_batch", dying)
    with pytest.raises(KeyboardInterrupt):
        _eval_cli(records, out, tiny_models, "--shard", "1/2", "--set", "reasoning_model.batch_size=1")
    monkeypatch.setattr(transformers_backend.TransformersReasoner, "generate_batch", real)
    stored = [json.loads(line) for line in (out / "completions.shard1of2.jsonl").read_text().splitlines()]
    assert len(stored) == 1
    asked: list[int] = []

    def counting(self, prompts, settings=None):  # type: ignore[no-untyped-def]
        asked.append(len(prompts))
        return real(self, prompts, settings)

    monkeypatch.setattr(transformers_backend.TransformersReasoner, "generate_batch", counting)
    assert _eval_cli(records, out, tiny_models, "--shard", "1/2") == 0
    n1 = sum(1 for r in subset if Shard(1, 2).owns(r["video_path"]))
    assert sum(asked) == n1 - 1  # the finished question was not asked again
    # The run without --shard merges both shards' completions: nothing left to generate.
    asked.clear()
    assert _eval_cli(records, out, tiny_models) == 0
    assert asked == []
    merged = json.loads((out / "metrics.json").read_text())
    for key in ("n", "accuracy_avg", "accuracy", "format_rate", "mean_completion_length"):
        assert merged[key] == expected[key], key
    rows = data.read_jsonl(out / "predictions.jsonl")
    assert sorted(r["Question_id"] for r in rows) == sorted(r["Question_id"] for r in subset)
