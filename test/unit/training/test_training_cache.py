"""Perception caching: batching, both modes, resume after a crash, record contents."""

from __future__ import annotations

import json

import pytest

from embodied_r_training import data
from embodied_r_training.perception_cache import AppendOnlyJsonl, cache_split, unit_key
from embodied_r_training.toy import make_published_tree


class CountingPerceiver:
    """A Perceiver whose answers depend only on the request, counting every call.

    `fail_after` makes call number N+1 raise, like a model server dying mid-run.
    """

    name = "counting"

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls = 0
        self.requests = 0
        self.batch_sizes: list[int] = []
        self.prompts: list[str] = []
        self.fail_after = fail_after

    def describe(self, images, prompt, settings=None):
        return self.describe_batch([(images, prompt)], settings)[0]

    def describe_batch(self, requests, settings=None):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("perception server went away")
        self.calls += 1
        self.requests += len(requests)
        self.batch_sizes.append(len(requests))
        out = []
        for images, prompt in requests:
            self.prompts.append(prompt)
            tag = sum(int(img[::16, ::16].sum()) for img in images) % 997
            if len(images) == 1:
                out.append(f"A grey wall ahead, texture {tag}, prompt {len(prompt)}.")
            else:
                out.append(
                    f"1. rotate right\n2. A new patch {tag} appears on the right.\n3. The lamp is ahead-left."
                )
        return out

    def close(self):
        pass


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("toycache")
    toy = make_published_tree(root / "download", vsi_scenes=2, seed=1)
    data.prepare(vsi=[toy["vsi_parquet"]], urban=[toy["urban"]], out=root / "prep", seed=0, ratios=(1, 0, 0))
    records = data.read_jsonl(root / "prep" / "train.jsonl")
    return toy, records


def _n_frames(out, video):
    rows = [r for r in AppendOnlyJsonl(out / "keyframes.jsonl").read() if r["video"] == video]
    return len(rows[0]["source_frames"])


def test_on_query_resume_after_crash_redoes_nothing(prepared, tmp_path):
    toy, records = prepared
    records = records[:8]  # two videos' worth of questions keeps it quick
    kwargs = dict(split="train", mode="on_query", batch_size=5, progress=False)

    clean = CountingPerceiver()
    stats = cache_split(records, perceiver=clean, out=tmp_path / "clean", **kwargs)
    assert stats.complete and stats.records_written == len(records)
    needed = clean.requests
    assert needed == sum(_n_frames(tmp_path / "clean", r["video_path"]) for r in records)
    assert max(clean.batch_sizes) == 5  # batched through describe_batch
    stem = records[0]["question"].splitlines()[0].removeprefix("Question: ")
    assert any(stem in p for p in clean.prompts)  # on_query prompts carry the question

    crashing = CountingPerceiver(fail_after=3)
    with pytest.raises(RuntimeError, match="went away"):
        cache_split(records, perceiver=crashing, out=tmp_path / "run", **kwargs)
    assert not (tmp_path / "run" / "train.on_query.jsonl").exists()  # nothing half-written
    stored = AppendOnlyJsonl(tmp_path / "run" / "descriptions.on_query.jsonl").read()
    assert len(stored) == crashing.requests == 15  # three finished batches kept

    resumed = CountingPerceiver()
    stats = cache_split(records, perceiver=resumed, out=tmp_path / "run", **kwargs)
    assert stats.complete
    assert resumed.requests == needed - crashing.requests  # nothing redone, nothing lost
    assert stats.frames_reused == crashing.requests
    assert (tmp_path / "run" / "train.on_query.jsonl").read_text() == (
        tmp_path / "clean" / "train.on_query.jsonl"
    ).read_text()

    again = CountingPerceiver()
    stats = cache_split(records, perceiver=again, out=tmp_path / "run", **kwargs)
    assert again.calls == 0 and stats.videos_skipped == stats.videos


def test_partial_line_from_a_kill_is_redone_once(prepared, tmp_path):
    toy, records = prepared
    records = records[:3]
    kwargs = dict(split="train", mode="streaming", batch_size=4, progress=False)
    first = CountingPerceiver()
    cache_split(records, perceiver=first, out=tmp_path, **kwargs)
    path = tmp_path / "descriptions.streaming.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    # A writer killed in the middle of the last line leaves it cut short.
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    second = CountingPerceiver()
    stats = cache_split(records, perceiver=second, out=tmp_path, **kwargs)
    assert second.requests == 1 and stats.complete
    assert len(AppendOnlyJsonl(path).read()) == len(lines)


def test_streaming_shares_descriptions_and_records_carry_the_prompt(prepared, tmp_path):
    toy, records = prepared
    video = records[0]["video_path"]
    same_video = [r for r in records if r["video_path"] == video]
    assert len(same_video) >= 3
    perceiver = CountingPerceiver()
    stats = cache_split(same_video, perceiver=perceiver, out=tmp_path,
                        split="val", mode="streaming", batch_size=16, progress=False)
    n = _n_frames(tmp_path, video)
    assert 4 <= n <= 32
    assert perceiver.requests == n  # one set of descriptions for all questions of the video
    assert stats.records_written == len(same_video)
    out = data.read_jsonl(tmp_path / "val.streaming.jsonl")
    assert len({unit_key(r, "streaming") for r in out}) == 1
    from embodied_r_ros.core.prompts.reasoning import REASONING_SYSTEM_PROMPT

    for cached, source in zip(out, same_video):
        assert cached["solution"] == source["answer"]
        assert cached["prompt"][0] == {"role": "system", "content": REASONING_SYSTEM_PROMPT}
        user = cached["prompt"][1]["content"]
        assert cached["video_text"] in user and source["question"] in user
        assert "Frame 0: Observe:" in cached["video_text"]
        assert "After rotate right" in cached["video_text"]
        assert cached["frames"][1]["action"] == "rotate right"
        assert cached["frames"][0]["action"] is None
        assert len(cached["frames"]) == len(cached["keyframes"]["source_frames"]) == n
    # Streaming descriptions are made without the question.
    stem = same_video[0]["question"].splitlines()[0].removeprefix("Question: ")
    assert not any(stem in p for p in perceiver.prompts)


def test_missing_video_is_reported_not_fatal(prepared, tmp_path):
    toy, records = prepared
    ghost = dict(records[0], Question_id="ghost", video_path="nowhere/none.mp4",
                 video={"file": str(toy["vsi_dir"] / "scannet.zip"), "member": "scannet/none.mp4"})
    stats = cache_split([records[0], ghost], perceiver=CountingPerceiver(),
                        out=tmp_path, split="test", mode="streaming", progress=False)
    assert stats.missing_videos == ["nowhere/none.mp4"] and stats.records_skipped == 1
    assert stats.complete and stats.records_written == 1


def test_cli_with_the_tiny_vlm(prepared, tiny_models, tmp_path):
    toy, records = prepared
    video = records[0]["video_path"]
    subset = [r for r in records if r["video_path"] == video][:2]
    data.write_jsonl_atomic(tmp_path / "prep" / "train.jsonl", subset)
    from embodied_r_training.cli import main

    argv = ["cache-perception", "--config", "perception_tiny.yaml", "--data", str(tmp_path / "prep"),
            "--split", "train", "--out", str(tmp_path / "cache"),
            "--mode", "streaming", "--no-progress", "--set", f"perception_model.model={tiny_models.vlm}",
            "--set", "perception_model.max_new_tokens=6", "--set", "keyframes.max_keyframes=4"]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "cache" / "train.streaming.summary.json").read_text())
    assert summary["complete"] and summary["records_written"] == 2
    assert summary["frames_described"] == 4  # 4 key frames, shared by both questions
    out = data.read_jsonl(tmp_path / "cache" / "train.streaming.jsonl")
    assert out[0]["video_text"] == out[1]["video_text"]
    assert out[0]["prompt"][1]["content"].endswith(subset[0]["question"])


def test_videos_from_the_zips_or_from_a_video_root(prepared, tmp_path):
    import zipfile

    from embodied_r_training.errors import VideoSourceError

    toy, records = prepared
    first = next(r for r in records if r["dataset"] != "urbanvideo")
    same = [r for r in records if r["video_path"] == first["video_path"]][:2]
    assert same[0]["video"]["member"] == first["video_path"]  # lives inside a zip
    zipped = CountingPerceiver()
    stats = cache_split(same, perceiver=zipped, out=tmp_path / "zip", split="train", mode="streaming",
                        progress=False)
    assert stats.complete and stats.videos_extracted == 1
    assert not list((tmp_path / "zip" / ".videos").rglob("*.mp4"))  # removed after decoding

    # The same videos unpacked into a tree, records without a location, --video-root.
    archive = toy["vsi_dir"] / f"{first['dataset']}.zip"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp_path / "tree")
    bare = [{k: v for k, v in r.items() if k != "video"} for r in same]
    with pytest.raises(VideoSourceError, match="no 'video' field.*--video-root"):
        cache_split(bare, perceiver=CountingPerceiver(), out=tmp_path / "none", split="train",
                    mode="streaming", progress=False)
    stats = cache_split(bare, perceiver=CountingPerceiver(), out=tmp_path / "tree_cache", split="train",
                        mode="streaming", progress=False, video_root=tmp_path / "tree")
    assert stats.complete and stats.videos_extracted == 0
    a = data.read_jsonl(tmp_path / "zip" / "train.streaming.jsonl")
    b = data.read_jsonl(tmp_path / "tree_cache" / "train.streaming.jsonl")
    assert [r["video_text"] for r in a] == [r["video_text"] for r in b]
    assert [r["keyframes"] for r in a] == [r["keyframes"] for r in b]


def test_a_prompts_file_shapes_training_prompts_as_it_does_the_robots(prepared, tmp_path):
    """One prompt file for both paths: the cache's perception prompts and the records'
    reasoning prompts come from it, exactly as the robot's prompts.file builds them."""
    from embodied_r_ros.core.memory.episode import render_video_text
    from embodied_r_ros.core.prompts.perception import first_frame_prompt, pair_prompt
    from embodied_r_ros.core.prompts.prompt_set import load_prompt_set
    from embodied_r_ros.core.prompts.reasoning import build_reasoning_messages

    _toy, records = prepared
    video = records[0]["video_path"]
    same_video = [r for r in records if r["video_path"] == video][:1]
    prompt_file = tmp_path / "my_prompts.yaml"
    prompt_file.write_text(
        "perception:\n"
        "  first_frame: 'MY FIRST FRAME PROMPT. {question}'\n"
        "  pair: 'MY PAIR PROMPT. {question}'\n"
        "reasoning:\n"
        "  system: 'MY SYSTEM PROMPT'\n"
        "  video_preamble: 'MY PREAMBLE'\n")
    prompts = load_prompt_set(prompt_file)
    perceiver = CountingPerceiver()
    cache_split(same_video, perceiver=perceiver, out=tmp_path / "cache", split="val",
                mode="on_query", progress=False, prompts=prompts)
    question = same_video[0]["question"]
    assert perceiver.prompts[0] == first_frame_prompt(question, prompts)
    assert perceiver.prompts[0].startswith("MY FIRST FRAME PROMPT")
    assert all(p == pair_prompt(question, prompts) for p in perceiver.prompts[1:])
    cached = data.read_jsonl(tmp_path / "cache" / "val.on_query.jsonl")[0]
    assert cached["prompt"][0] == {"role": "system", "content": "MY SYSTEM PROMPT"}
    assert cached["video_text"].startswith("MY PREAMBLE")
    from embodied_r_ros.core.types import FrameDescription

    frames = [FrameDescription(f["index"], f["observation"], f["action"]) for f in cached["frames"]]
    assert cached["prompt"] == build_reasoning_messages(render_video_text(frames, prompts),
                                                        question, prompts)
