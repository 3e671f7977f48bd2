"""Replay of broken recordings: missing/zero stamps, out-of-order and duplicate messages,
a resolution change midway, a zero-length bag, corrupt files. Every bag here is a real
rosbag2 file written by rosbags (`bag_io.ImageBagWriter`, or rosbags' Writer directly);
each case gives a result or a `BagError` that names the file."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from embodied_r_ros.core.errors import BagError, InvalidRequestError
from embodied_r_ros.sample_data.bag_io import (
    COMPRESSED_TYPE,
    BagReadReport,
    ImageBagWriter,
    iter_bag_frames,
    read_image_bag,
)

STORAGES = ["mcap", "sqlite3"]


def _frames(n: int, h: int = 24, w: int = 32, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(n)]


def _bag(path: Path, stamps: list[float], log_ns: list[int] | None = None, *, storage="mcap",
         frames=None, compressed=False) -> Path:
    frames = frames if frames is not None else _frames(len(stamps))
    with ImageBagWriter(path, storage=storage, compressed=compressed) as bag:
        for i, (image, stamp) in enumerate(zip(frames, stamps)):
            bag.write(image, stamp, None if log_ns is None else log_ns[i])
    return path


def _read(path: Path, **kwargs):  # type: ignore[no-untyped-def]
    report = BagReadReport(str(path))
    frames = list(iter_bag_frames(path, report=report, **kwargs))
    return frames, report


# --------------------------------------------------------------------------- stamps
@pytest.mark.parametrize("storage", STORAGES)
def test_zero_stamps_fall_back_to_record_time_on_the_header_clock(tmp_path, storage, caplog):
    # The camera clock runs 100 s ahead of the recorder's; frames 2 and 3 have no stamp.
    log_ns = [int(5e9 + i * 0.5e9) for i in range(6)]
    stamps = [105.0, 105.5, 0.0, 0.0, 107.0, 107.5]
    bag = _bag(tmp_path / "b", stamps, log_ns, storage=storage)
    with caplog.at_level(logging.WARNING, logger="embodied_r_ros.bag"):
        frames, report = _read(bag)
    assert [f.stamp_s for f in frames] == pytest.approx([105.0, 105.5, 106.0, 106.5, 107.0, 107.5])
    assert [f.stamp_from for f in frames] == ["header", "header", "record", "record", "header", "header"]
    assert report.stamp_fallbacks == 2 and report.frames == 6
    assert any(str(bag) in w and "zero header stamp" in w for w in report.warnings)
    assert any("zero header stamp" in r.getMessage() for r in caplog.records)
    # stamps="record" ignores the header stamps altogether.
    frames, report = _read(bag, stamps="record")
    assert [f.stamp_s for f in frames] == pytest.approx([5.0 + 0.5 * i for i in range(6)])
    assert report.stamp_fallbacks == 0


def test_a_bag_with_no_stamps_at_all_replays_on_record_time(tmp_path):
    log_ns = [int(1e9 + i * 0.25e9) for i in range(5)]
    frames, report = _read(_bag(tmp_path / "b", [0.0] * 5, log_ns))
    assert [f.stamp_s for f in frames] == pytest.approx([1.0, 1.25, 1.5, 1.75, 2.0])
    assert report.stamp_fallbacks == 5


# --------------------------------------------------------------------------- order
def test_out_of_order_messages_are_resorted_or_dropped(tmp_path):
    # Recorded order: a swap (3, 2), a duplicate of 4, and frame 0.5 arriving 7 frames late.
    stamps = [1.0, 3.0, 2.0, 4.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 0.5, 10.0]
    log_ns = [int(1e9 * (1 + 0.1 * i)) for i in range(len(stamps))]
    images = _frames(len(stamps))
    bag = _bag(tmp_path / "b", stamps, log_ns, frames=images)

    frames, report = _read(bag, reorder_window=4)
    assert [f.stamp_s for f in frames] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert [f.index for f in frames] == list(range(10))
    # The re-sorted frame carries its own image.
    assert np.array_equal(frames[1].image(), images[2]) and np.array_equal(frames[2].image(), images[1])
    assert report.reordered == 1 and report.dropped_duplicate == 1
    assert report.dropped_out_of_order == 1  # 0.5 came later than the window allows
    assert any("re-sorted" in w for w in report.warnings)
    assert any("dropped" in w and str(bag) in w for w in report.warnings)

    # A window large enough takes the late frame back in; window 0 keeps recorded order.
    frames, report = _read(bag, reorder_window=16)
    assert [f.stamp_s for f in frames][:2] == [0.5, 1.0] and report.dropped_out_of_order == 0
    frames, report = _read(bag, reorder_window=0)
    assert [f.stamp_s for f in frames] == [1.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert report.dropped_out_of_order == 2 and report.reordered == 0


# --------------------------------------------------------------------------- content
def test_resolution_change_midway_is_read_and_reported(tmp_path):
    images = _frames(3, 24, 32) + _frames(3, 48, 64, seed=1)
    bag = _bag(tmp_path / "b", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], frames=images, compressed=True)
    report = BagReadReport(str(bag))
    got = list(read_image_bag(bag, report=report))
    assert [g.image.shape for g in got] == [(24, 32, 3)] * 3 + [(48, 64, 3)] * 3
    assert report.sizes == [(32, 24), (64, 48)]
    assert any("32x24 to 64x48 at frame 3" in w for w in report.warnings)


@pytest.mark.parametrize("storage", STORAGES)
def test_zero_length_bag_yields_nothing_and_says_so(tmp_path, storage):
    with ImageBagWriter(tmp_path / "empty", storage=storage):
        pass
    frames, report = _read(tmp_path / "empty")
    assert frames == [] and report.messages == 0 and report.topic == "/camera/image_raw"
    assert any("zero-length bag" in w and str(tmp_path / "empty") in w for w in report.warnings)


def test_damaged_messages_are_dropped_not_fatal(tmp_path):
    """A payload that is not CDR at all is dropped while reading; a well-formed
    CompressedImage with a broken JPEG reads, and fails only when decoded."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_HUMBLE)
    T = ts.types
    path = tmp_path / "damaged"
    good = np.frombuffer(__import__("cv2").imencode(".jpg", _frames(1)[0])[1].tobytes(), np.uint8)
    with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as w:
        conn = w.add_connection("/cam/compressed", COMPRESSED_TYPE, typestore=ts)
        for i, data in enumerate([good, np.frombuffer(b"not a jpeg", np.uint8), good]):
            msg = T[COMPRESSED_TYPE](header=T["std_msgs/msg/Header"](
                stamp=T["builtin_interfaces/msg/Time"](sec=i + 1, nanosec=0), frame_id="c"),
                format="jpeg", data=data)
            w.write(conn, (i + 1) * 10**9, ts.serialize_cdr(msg, COMPRESSED_TYPE))
        w.write(conn, 4 * 10**9, b"\x00\x01")  # truncated garbage
    frames, report = _read(path)
    assert len(frames) == 3 and report.undeserializable == 1 and report.messages == 4
    frames[0].image()
    with pytest.raises(InvalidRequestError):
        frames[1].image()


# --------------------------------------------------------------------------- unreadable
def _sample_bag(tmp_path: Path, storage: str) -> Path:
    return _bag(tmp_path / f"bag_{storage}", [float(i + 1) for i in range(40)], storage=storage,
                frames=_frames(40, 96, 128))


@pytest.mark.parametrize("storage", STORAGES)
def test_truncated_or_garbled_storage_file_is_a_bag_error_naming_it(tmp_path, storage):
    bag = _sample_bag(tmp_path, storage)
    data = next(p for p in bag.iterdir() if p.name != "metadata.yaml")
    size = data.stat().st_size
    with open(data, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(BagError) as exc:
        list(iter_bag_frames(bag))
    assert str(bag) in str(exc.value) and exc.value.path == str(bag)
    assert "corrupt" in str(exc.value)


def test_damage_midway_is_a_bag_error_after_the_frames_before_it(tmp_path):
    """A sqlite3 bag whose middle page is destroyed: the frames before it are read, then
    reading stops with a BagError naming the bag and how far it got."""
    bag = _sample_bag(tmp_path, "sqlite3")
    data = next(bag.glob("*.db3"))
    raw = bytearray(data.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 4096] = b"\xff" * 4096
    data.write_bytes(bytes(raw))
    seen = []
    with pytest.raises(BagError) as exc:
        for frame in iter_bag_frames(bag):
            seen.append(frame.stamp_s)
    assert str(bag) in str(exc.value) and "reading failed after" in str(exc.value)
    assert 0 < len(seen) < 40


def test_other_unreadable_inputs_name_the_file(tmp_path):
    with pytest.raises(BagError, match="does not exist"):
        list(iter_bag_frames(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(BagError, match="no metadata.yaml"):
        list(iter_bag_frames(tmp_path / "plain"))
    loose = tmp_path / "loose.mcap"
    loose.write_bytes(b"\x89MCAP0\r\n")
    with pytest.raises(BagError, match="without a metadata.yaml"):
        list(iter_bag_frames(loose))
    bag = _sample_bag(tmp_path, "sqlite3")
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [unclosed")
    with pytest.raises(BagError) as exc:
        list(iter_bag_frames(bag))
    assert str(bag) in str(exc.value)
    with pytest.raises(InvalidRequestError, match="stamps must be"):
        list(iter_bag_frames(bag, stamps="wall"))


# --------------------------------------------------------------------------- replay-eval
def test_replay_eval_over_broken_bags_gives_results_or_named_errors(tmp_path, tiny_models, capsys):
    """One folder with each kind of broken bag, evaluated in fast mode: the readable ones
    are answered, the empty one answers NO_KEYFRAMES naming the bag, the corrupt one is
    reported by name (exit code 1) and its questions stay unanswered for a rerun."""
    from embodied_r_ros import replay_eval
    from embodied_r_ros.sample_data.scene import render_clip

    clip = render_clip(fps=2.0, width=160, height=120)
    n = len(clip.frames)
    bags = tmp_path / "bags"
    stamps = list(clip.stamps_s)
    log_ns = [int((100 + s) * 1e9) for s in stamps]
    no_stamps = [0.0 if i % 3 == 1 else s + 1.0 for i, s in enumerate(stamps)]
    _bag(bags / "no_stamps.mcap", no_stamps, log_ns, frames=clip.frames)
    swapped = list(range(n))
    for i in range(4, n - 1, 7):
        swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
    _bag(bags / "out_of_order.mcap", [stamps[i] + 1.0 for i in swapped],
         [log_ns[i] for i in range(n)], frames=[clip.frames[i] for i in swapped])
    import cv2

    bigger = [cv2.resize(f, (320, 240)) if i >= n // 2 else f for i, f in enumerate(clip.frames)]
    _bag(bags / "resized.db3", [s + 1.0 for s in stamps], storage="sqlite3", frames=bigger,
         compressed=True)
    with ImageBagWriter(bags / "empty.mcap"):
        pass
    corrupt = _bag(bags / "corrupt.mcap", [s + 1.0 for s in stamps], frames=clip.frames)
    storage = next(corrupt.glob("*.mcap"))
    storage.write_bytes(storage.read_bytes()[: storage.stat().st_size // 3])

    question = {"question": "Question: Where did I start?\nChoices:\nA. left\nB. right",
                "answer": "A", "question_category": "route_planning"}
    names = ["no_stamps.mcap", "out_of_order.mcap", "resized.db3", "empty.mcap", "corrupt.mcap"]
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps([{**question, "Question_id": name, "bag": name} for name in names]))
    (tmp_path / "tiny_models").symlink_to(Path(tiny_models.vlm).parent, target_is_directory=True)
    out = tmp_path / "eval" / "broken.json"
    argv = ["--bag", str(bags), "--questions", str(qfile), "--mode", "fast", "--tiny-models",
            "--artifacts", str(tmp_path), "--set", "perception.max_new_tokens=4", "--out", str(out)]
    assert replay_eval.main(argv) == 1  # one bag could not be replayed
    captured = capsys.readouterr()
    assert f"corrupt.mcap: cannot be replayed: {bags / 'corrupt.mcap'}" in captured.err
    results = {r["question_id"]: r for r in map(json.loads, out.with_suffix(".results.jsonl")
                                                .read_text().splitlines())}
    assert set(results) == set(names) - {"corrupt.mcap"}
    for name in ("no_stamps.mcap", "out_of_order.mcap", "resized.db3"):
        assert results[name]["keyframes_used"] >= 4, name  # answered from the bag's frames
        assert results[name]["error_code"] in (0, 9), results[name]["message"]
    assert results["empty.mcap"]["error_code"] == 1  # NO_KEYFRAMES
    assert "zero-length bag" in results["empty.mcap"]["message"]
    assert str(bags / "empty.mcap") in results["empty.mcap"]["message"]

    episodes = {e["bag"]: e for e in map(json.loads, out.with_suffix(".episodes.jsonl")
                                         .read_text().splitlines())}
    assert episodes["no_stamps.mcap"]["read"]["stamp_fallbacks"] == len(range(1, n, 3))
    assert episodes["out_of_order.mcap"]["read"]["reordered"] > 0
    assert episodes["out_of_order.mcap"]["frames_published"] == n  # re-sorted, none lost
    assert episodes["resized.db3"]["read"]["sizes"] == [[160, 120], [320, 240]]
    summary = json.loads(out.read_text())
    assert list(summary["bag_errors"]) == ["corrupt.mcap"]
    assert summary["questions"] == 4 and summary["expected_questions"] == 5
    assert "corrupt.mcap" in out.with_suffix(".md").read_text()

    # Replacing the corrupt bag and running again answers only its question.
    shutil.rmtree(corrupt)
    _bag(corrupt, [s + 1.0 for s in stamps], frames=clip.frames)
    assert replay_eval.main(argv) == 0
    assert "4 already answered" in capsys.readouterr().out
    assert len(out.with_suffix(".results.jsonl").read_text().splitlines()) == 5
