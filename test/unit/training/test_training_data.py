"""Data preparation from files laid out as published: VSI-Bench (parquet, newer jsonl and
debiased/pruned variants, videos in zips or extracted), UrbanVideo-Bench (MCQ.parquet +
videos/), records in the dataset's format; scene split; typed errors; drop counts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from embodied_r_training import data
from embodied_r_training.categories import CATEGORIES, canonical_category
from embodied_r_training.errors import DatasetFileError, MissingColumnError, VideoSourceError
from embodied_r_training.videos import VideoMaterialiser, VideoRef

from helpers.published_fixtures import (
    copy_tree,
    drop_zip_member,
    make_published_tree,
    urban_row,
    vsi_row,
    write_jsonl,
    write_lfs_pointer,
    write_urban,
    write_vsi,
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The synthetic download tree with VSI videos in zips (built once, read-only)."""
    return make_published_tree(tmp_path_factory.mktemp("published"), vsi_scenes=4, seed=3)


@pytest.fixture(scope="module")
def questions_only(tmp_path_factory):
    return make_published_tree(tmp_path_factory.mktemp("questions"), vsi_scenes=12, seed=5, videos=False)


def _splits(out: Path) -> dict[str, list[dict]]:
    return {name: data.read_jsonl(out / f"{name}.jsonl") for name in data.SPLITS}


# --------------------------------------------------------------------------- rules
def test_category_merging_and_dropping():
    for level in ("easy", "medium", "hard"):
        assert canonical_category(f"object_rel_direction_{level}") == "object_rel_direction"
    assert canonical_category("Landmark Position") == "landmark_position"
    assert canonical_category("Progress-Evaluation") == "progress_evaluation"
    assert canonical_category("object_counting") is None
    assert canonical_category("Object Recall") is None


@pytest.mark.parametrize("video_id, flight", [
    # EmbodiedCity: cut before the second underscore; one underscore: up to the dot.
    ("EmbodiedCity_1_0_0.mp4", "EmbodiedCity_1"),
    ("EmbodiedCity_12_3.mp4", "EmbodiedCity_12"),
    ("EmbodiedCity_2.mp4", "EmbodiedCity_2"),
    # AerialVLN: the first three underscore fields; exactly two underscores: up to the dot.
    ("AerialVLN_3_1WQ7_0.mp4", "AerialVLN_3_1WQ7"),
    ("AerialVLN_3_1WQ7_10_2.mp4", "AerialVLN_3_1WQ7"),
    ("AerialVLN_7_X.mp4", "AerialVLN_7_X"),
    # RealWorld: one underscore: up to the dot; otherwise RealWorld_<first number>.
    ("RealWorld_4.mp4", "RealWorld_4"),
    ("RealWorld_4_1.mp4", "RealWorld_4"),
    ("RealWorld_clip_9_2.mp4", "RealWorld_9"),
    # No rule applies.
    ("EmbodiedCity.mp4", None),
    ("AerialVLN_1.mp4", None),
    ("Drone_1_2.mp4", None),
])
def test_urban_flight_names_follow_the_reference(video_id, flight):
    assert data.urban_scene_name(video_id) == flight


def test_split_sizes_are_the_reference_arithmetic():
    assert data.split_sizes(100) == (75, 5, 20)
    assert data.split_sizes(1500) == (1125, 75, 300)
    assert data.split_sizes(19) == (14, 0 + 1, 4)  # int(0.95) = 0: val still gets one scene
    assert data.split_sizes(3) == (2, 0, 1)  # too few scenes left for a val scene
    assert data.split_sizes(10, (1, 0, 0)) == (10, 0, 0)
    with pytest.raises(ValueError):
        data.split_sizes(10, (0.5, -0.1, 0.6))


# --------------------------------------------------------------------------- the download tree
def test_prepare_reads_the_published_tree_with_zipped_videos(tree, tmp_path):
    from embodied_r_training.cli import main

    out = tmp_path / "prep"
    rc = main(["prepare", "--vsi", str(tree["vsi_parquet"]), "--urban", str(tree["urban"]),
               "--records", str(tree["records"]), "--records-video-root", str(tree["vsi_dir"]),
               "--out", str(out), "--seed", "0"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    # Every usable question is kept, with no manual step: nothing is missing.
    assert summary["kept"] == tree["kept_vsi"] + tree["kept_urban"] + tree["n_records"]
    assert "missing_video" not in summary["dropped"]
    assert summary["dropped"] == {
        "category:object_counting": tree["vsi_scenes"], "category:room_size_estimation": tree["vsi_scenes"],
        "category:Object Recall": len(tree["urban_flight_of"]),
    }
    assert summary["video_roots"] == {"vsi": str(tree["vsi_dir"]), "urban": str(tree["urban_videos"]),
                                      "records": str(tree["vsi_dir"])}
    splits = _splits(out)
    rows = [r for rows in splits.values() for r in rows]
    assert len(rows) == summary["kept"]
    for r in rows:
        assert r["question_category"] in CATEGORIES
        assert r["question"].startswith("Question: ") and "\nChoices:\nA. " in r["question"]
        ref = VideoRef.from_json(r["video"])
        if r["dataset"] == "urbanvideo":
            assert ref.member is None and Path(ref.file) == tree["urban_videos"] / r["video_id"]
            assert r["scene_name"] == tree["urban_flight_of"][r["video_id"]]
        else:  # VSI (and the records, whose videos are in the same zips)
            assert Path(ref.file).name == f"{r['video_path'].split('/')[0]}.zip"
            assert ref.member == r["video_path"] and r["video_path"].endswith(f"/{r['scene_name']}.mp4")
    # The two records find their video by file name inside the zips and join its scene.
    recs = [r for r in rows if r["Question_id"].startswith("record_")]
    vsi_of_scene = [r for r in rows if r["dataset"] != "records" and r["scene_name"] == recs[0]["scene_name"]]
    assert len(recs) == 2 and vsi_of_scene
    assert {r["video_path"] for r in recs} == {vsi_of_scene[0]["video_path"]}
    assert recs[0]["question"].endswith("Choices:\nA. left\nB. right\nC. back")
    # Scenes (VSI scenes, UrbanVideo flights) are never in two splits.
    scenes = {name: {r["scene_name"] for r in rows} for name, rows in splits.items()}
    assert not scenes["train"] & scenes["val"] and not scenes["train"] & scenes["test"]
    assert not scenes["val"] & scenes["test"]
    n_scenes = tree["vsi_scenes"] + tree["urban_flights"]
    assert sum(len(s) for s in scenes.values()) == n_scenes
    assert tuple(len(scenes[n]) for n in data.SPLITS) == data.split_sizes(n_scenes)
    # Every clip of a multi-clip flight went to the same split as its siblings.
    split_of_clip = {r["video_id"]: name for name, rows in splits.items() for r in rows if r["dataset"] == "urbanvideo"}
    for flight in set(tree["urban_flight_of"].values()):
        clips = [v for v, f in tree["urban_flight_of"].items() if f == flight]
        assert len({split_of_clip[c] for c in clips}) == 1, flight
    assert any(sum(1 for f in tree["urban_flight_of"].values() if f == g) > 1 for g in scenes["train"] | scenes["test"])


def test_zip_members_open_with_opencv(tree, tmp_path):
    import cv2

    data.prepare(vsi=[tree["vsi_parquet"]], out=tmp_path / "prep")
    record = data.read_jsonl(tmp_path / "prep" / "train.jsonl")[0]
    ref = data.record_video(record)
    mat = VideoMaterialiser(tmp_path / "cache")
    with mat.local_file(ref) as path:
        cap = cv2.VideoCapture(str(path))
        ok, frame = cap.read()
        cap.release()
        assert ok and frame.shape == (120, 160, 3)
    assert not path.exists() and mat.extracted == 1  # removed after use


def test_extracted_tree_is_read_the_same_way(tmp_path):
    tree = make_published_tree(tmp_path / "dl", vsi_scenes=2, seed=1, extracted=True)
    assert not list(tree["vsi_dir"].glob("*.zip"))
    summary = data.prepare(vsi=[tree["vsi_parquet"]], out=tmp_path / "prep")
    assert summary["kept"] == tree["kept_vsi"] and "missing_video" not in summary["dropped"]
    for rows in _splits(tmp_path / "prep").values():
        for r in rows:
            ref = VideoRef.from_json(r["video"])
            assert ref.member is None and Path(ref.file) == tree["vsi_dir"] / r["video_path"]


def test_newer_revision_jsonl_and_the_debiased_and_pruned_subsets(tree, tmp_path):
    ids = {}
    for name, path, subset in [("parquet", tree["vsi_parquet"], "all"), ("jsonl", tree["vsi_jsonl"], "all"),
                               ("debiased", tree["vsi_jsonl"], "debiased"), ("pruned", tree["vsi_jsonl"], "pruned"),
                               ("debiased_file", tree["vsi_debiased"], "all"),
                               ("pruned_file", tree["vsi_pruned"], "pruned")]:
        drops: Counter = Counter()
        records = data.load_vsi(path, drops, subset=subset)
        ids[name] = {r["Question_id"] for r in records}
        if subset != "all" and name == "debiased":
            assert drops["not_in_subset:debiased"] > 0
    assert ids["parquet"] == ids["jsonl"]  # the newer file holds the same questions
    assert ids["debiased"] | ids["pruned"] == ids["jsonl"] and not ids["debiased"] & ids["pruned"]
    assert ids["debiased_file"] == ids["debiased"] and ids["pruned_file"] == ids["pruned"]
    rows = [json.loads(line) for line in tree["vsi_jsonl"].read_text().splitlines()]
    pruned_ids = {f"vsi_{r['id']}" for r in rows if r["pruned"]}
    assert ids["pruned"] == pruned_ids & ids["jsonl"]
    with pytest.raises(MissingColumnError, match="no 'pruned' column and there is no pruned_ids.txt.*test.jsonl"):
        data.load_vsi(tree["vsi_parquet"], Counter(), subset="debiased")
    # A file without the column, with the revision's pruned_ids.txt beside it.
    bare = write_jsonl([{k: v for k, v in r.items() if k != "pruned"} for r in rows], tmp_path / "ids" / "test.jsonl")
    (tmp_path / "ids" / "pruned_ids.txt").write_text("".join(f"{r['id']}\n" for r in rows if r["pruned"]))
    assert {r["Question_id"] for r in data.load_vsi(bare, Counter(), subset="debiased")} == ids["debiased"]
    summary = data.prepare(vsi=[tree["vsi_jsonl"]], vsi_subset="debiased", out=tmp_path / "p",
                           vsi_video_root=tree["vsi_dir"])
    assert summary["kept"] == len(ids["debiased"]) and summary["vsi_subset"] == "debiased"


def test_numeric_questions_kept_with_the_option(tree):
    drops: Counter = Counter()
    records = data.load_vsi(tree["vsi_parquet"], drops, include_numeric=True)
    numeric = [r for r in records if r["answer_type"] == "numeric"]
    assert len(numeric) == 2 * tree["vsi_scenes"] and not drops
    assert {r["question_category"] for r in numeric} == {"object_counting", "room_size_estimation"}
    assert all(r["answer"].isdigit() and "Choices" not in r["question"] for r in numeric)


# --------------------------------------------------------------------------- loaders
def test_vsi_loader_letters_text_answers_and_drops(tmp_path):
    rows = [
        vsi_row(1, "object_rel_direction_hard", scene_name="s1", question="Is the door left or right of me?",
                options=["A. left", "B. right"], ground_truth="B"),
        vsi_row(2, "object_rel_distance", scene_name="s1", question="Which is closest to the bed?",
                options=["lamp", "sofa", "desk"], ground_truth="sofa"),
        vsi_row(3, "object_counting", dataset="arkitscenes", scene_name="s2", question="How many chairs?",
                options=None, ground_truth="4"),
        vsi_row(4, "route_planning", dataset="arkitscenes", scene_name="s2", question="Which way?",
                options=["A. left", "B. right"], ground_truth="a plane"),
        vsi_row(5, "obj_appearance_order", scene_name="s1", question="What came first?",
                options=["A. sofa", "B. lamp"], ground_truth="B. lamp"),
    ]
    path = write_vsi(rows, tmp_path / "test-00000-of-00001.parquet")
    drops: Counter = Counter()
    records = data.load_vsi(path, drops)
    assert [r["Question_id"] for r in records] == ["vsi_1", "vsi_2", "vsi_5"]
    first, second, fifth = records
    assert first["question_category"] == "object_rel_direction"
    assert first["source_category"] == "object_rel_direction_hard"
    assert first["answer"] == "B"
    assert first["question"] == "Question: Is the door left or right of me?\nChoices:\nA. left\nB. right"
    assert first["video_path"] == "scannet/s1.mp4" and "video" not in first  # no root: not looked up
    assert second["answer"] == "B" and "B. sofa" in second["question"]  # option text -> letter
    assert fifth["answer"] == "B"  # "B. lamp"
    assert drops == Counter({"category:object_counting": 1, "unmatched_answer": 1})


def test_urban_loader_reads_every_choice_layout(tmp_path):
    rows = [
        urban_row(7, "EmbodiedCity_1_0_0.mp4", "Counterfactual",
                  "Question: If I had turned left, what would I see?\nChoices:\nA. a river\nB. a road", "A"),
        urban_row(8, "EmbodiedCity_1_0_1.mp4", "Action Generation",
                  "What should I do next? A. fly up B. land C. turn right", "C."),
        urban_row(9, "AerialVLN_2_Q_0.mp4", "Landmark Position", "Where is the tower? Choose: A. left B. right", "B"),
        urban_row(10, "AerialVLN_2_Q_1.mp4", "Progress Evaluation",
                  "How far along am I?\nOption:\nA. start\nB. end", "A"),
        urban_row(11, "RealWorld_3_1.mp4", "Landmark Position", "Where is the bridge?\nA. ahead\nB. behind", "A"),
        urban_row(12, "v2.mp4", "Object Recall", "What did you see?\nA. car\nB. bus", "A"),
        urban_row(13, "v3.mp4", "Counterfactual", "A question without options?", "A"),
    ]
    path = write_urban(rows, tmp_path / "MCQ.parquet")
    drops, notes = Counter(), Counter()
    records = data.load_urban(path, drops, notes=notes)
    by_id = {r["Question_id"]: r for r in records}
    assert list(by_id) == ["urban_7", "urban_8", "urban_9", "urban_10", "urban_11"]
    assert by_id["urban_7"]["question"] == (
        "Question: If I had turned left, what would I see?\nChoices:\nA. a river\nB. a road")
    assert by_id["urban_8"]["question"] == (
        "Question: What should I do next?\nChoices:\nA. fly up\nB. land\nC. turn right")
    assert by_id["urban_8"]["answer"] == "C"
    assert by_id["urban_9"]["question"] == "Question: Where is the tower?\nChoices:\nA. left\nB. right"
    assert by_id["urban_10"]["question"] == "Question: How far along am I?\nChoices:\nA. start\nB. end"
    assert by_id["urban_11"]["question"] == "Question: Where is the bridge?\nChoices:\nA. ahead\nB. behind"
    assert [by_id[f"urban_{i}"]["scene_name"] for i in (7, 8, 9, 10, 11)] == [
        "EmbodiedCity_1", "EmbodiedCity_1", "AerialVLN_2_Q", "AerialVLN_2_Q", "RealWorld_3"]
    assert drops == Counter({"category:Object Recall": 1, "no_choices": 1})
    assert notes == Counter({"urban_scene_unmatched": 2})  # v2, v3: the reference's empty scene


def test_records_in_the_dataset_format(tmp_path):
    """Records written in the dataset's own record format (video tag, role preamble,
    "videos" path, no scene_name), as JSON list and as JSONL."""
    demo = [
        {"Question_id": "word_infer", "video_id": "0a1b2c3d4e.mp4", "question_category": "object_rel_direction",
         "question": "Please assume the role of an agent. The video represents your egocentric observations "
         "from the past to the present. Question: Is the door to my left, right, or back?\n\nChoices: \n"
         "A. left\nB. right\nC. back\n", "answer": "C"},
        {"Question_id": "video_infer", "video_id": "0a1b2c3d4e.mp4", "question_category": "object_rel_distance",
         "question": "<video>Please assume the role of an agent. The video represents your egocentric "
         "observations from the past to the present. Question: Which is closest to the door?\n\nChoices: \n"
         "A. sofa\nB. chair\n", "answer": "B", "videos": "DataPath/0a1b2c3d4e.mp4"},
    ]
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo, indent=4))
    records = data.load_records(path, Counter())
    assert [r["question"] for r in records] == [
        "Question: Is the door to my left, right, or back?\nChoices:\nA. left\nB. right\nC. back",
        "Question: Which is closest to the door?\nChoices:\nA. sofa\nB. chair",
    ]
    assert [r["answer"] for r in records] == ["C", "B"]
    assert {r["scene_name"] for r in records} == {"0a1b2c3d4e"}
    jsonl = write_jsonl(demo, tmp_path / "demo.jsonl")
    assert data.load_records(jsonl, Counter()) == records
    # With a video root: found under "DataPath/..." (the videos field) as a real file.
    from helpers.published_fixtures import write_clip

    write_clip(tmp_path / "vids" / "DataPath" / "0a1b2c3d4e.mp4", seed=1, seconds=2)
    from embodied_r_training.videos import VideoRoot

    found = data.load_records(path, Counter(), root=VideoRoot(tmp_path / "vids"))
    assert [r["video_path"] for r in found] == ["DataPath/0a1b2c3d4e.mp4"] * 2  # by file name, then by path


# --------------------------------------------------------------------------- errors and drops
def test_wrong_files_raise_typed_errors_that_name_file_and_expectation(tree, tmp_path):
    with pytest.raises(DatasetFileError,
                       match=r"nowhere\.parquet \(given with --vsi; expected VSI-Bench.*does not exist"):
        data.load_vsi(tmp_path / "nowhere.parquet", Counter())
    lfs = write_lfs_pointer(tmp_path / "lfs" / "test-00000-of-00001.parquet")
    with pytest.raises(DatasetFileError, match="Git LFS pointer"):
        data.load_vsi(lfs, Counter())
    renamed = tmp_path / "renamed.parquet"
    renamed.write_bytes(tree["vsi_jsonl"].read_bytes())
    with pytest.raises(DatasetFileError, match="name ends in .parquet but the content is not parquet"):
        data.load_vsi(renamed, Counter())
    with pytest.raises(DatasetFileError, match="zip archive"):
        data.load_vsi(tree["vsi_dir"] / "scannet.zip", Counter())
    with pytest.raises(MissingColumnError, match=r"MCQ\.parquet.*lacks column\(s\) \['id', 'dataset', 'scene_name'.*"
                       r"looks like UrbanVideo-Bench MCQ\.parquet: pass it with --urban"):
        data.load_vsi(tree["urban"], Counter())
    with pytest.raises(MissingColumnError, match=r"looks like VSI-Bench: pass it with --vsi"):
        data.load_urban(tree["vsi_parquet"], Counter())
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(tree["vsi_parquet"]).drop_columns(["options"])
    pq.write_table(table, tmp_path / "no_options.parquet")
    with pytest.raises(MissingColumnError, match=r"lacks column\(s\) \['options'\]"):
        data.load_vsi(tmp_path / "no_options.parquet", Counter())
    broken = tmp_path / "broken.jsonl"
    broken.write_text(tree["vsi_jsonl"].read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(DatasetFileError, match="line 2 is not valid JSON"):
        data.load_vsi(broken, Counter())
    bad_pruned = write_jsonl([vsi_row(1, "route_planning", options=["A. x", "B. y"], pruned="maybe")],
                             tmp_path / "bad_pruned.jsonl")
    with pytest.raises(DatasetFileError, match="pruned='maybe'"):
        data.load_vsi(bad_pruned, Counter(), subset="debiased")
    assert pa  # the parquet writer above really is pyarrow's


def test_video_roots_that_cannot_work_are_errors(tree, tmp_path):
    with pytest.raises(VideoSourceError, match=r"UrbanVideo-Bench video root .*nowhere does not exist "
                                               r"\(set it with --urban-video-root\)"):
        data.prepare(urban=[tree["urban"]], urban_video_root=tmp_path / "nowhere", out=tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(VideoSourceError, match="holds no videos.*--vsi-video-root.*--no-video-check"):
        data.prepare(vsi=[tree["vsi_parquet"]], vsi_video_root=tmp_path / "empty", out=tmp_path / "o")
    # Questions alone, without videos: allowed, and the records then carry no location.
    summary = data.prepare(vsi=[tree["vsi_parquet"]], vsi_video_root=tmp_path / "empty", check_videos=False,
                           out=tmp_path / "o")
    assert summary["kept"] == tree["kept_vsi"] and summary["video_roots"] == {"vsi": None}
    assert all("video" not in r for rows in _splits(tmp_path / "o").values() for r in rows)


def test_missing_videos_are_dropped_and_counted(tree, tmp_path):
    copy = copy_tree(tree["root"], tmp_path / "dl")
    vsi_dir, urban_videos = copy / "VSI-Bench", copy / "UrbanVideo-Bench" / "videos"
    scannet = [r for r in data.load_vsi(vsi_dir / "test-00000-of-00001.parquet", Counter())
               if r["dataset"] == "scannet"]
    member = scannet[0]["video_path"]
    drop_zip_member(vsi_dir / "scannet.zip", member)
    (urban_videos / "RealWorld_5.mp4").unlink()
    summary = data.prepare(vsi=[vsi_dir / "test-00000-of-00001.parquet"],
                           urban=[copy / "UrbanVideo-Bench" / "MCQ.parquet"], out=tmp_path / "prep")
    lost_vsi = sum(1 for r in scannet if r["video_path"] == member)
    assert lost_vsi == 6  # the six kept questions of that scene
    assert summary["dropped"]["missing_video"] == lost_vsi + 4  # + the four kept questions of the clip
    assert summary["kept"] == tree["kept_vsi"] + tree["kept_urban"] - lost_vsi - 4
    per_file = {Path(i["file"]).name: i for i in summary["inputs"]}
    assert per_file["MCQ.parquet"]["kept"] == tree["kept_urban"] - 4


def test_split_is_deterministic_by_seed(questions_only, tmp_path):
    kwargs = dict(vsi=[questions_only["vsi_parquet"]], urban=[questions_only["urban"]], check_videos=False)
    data.prepare(out=tmp_path / "a", seed=0, **kwargs)
    data.prepare(out=tmp_path / "b", seed=0, **kwargs)
    data.prepare(out=tmp_path / "c", seed=1, **kwargs)
    for name in data.SPLITS:
        assert (tmp_path / "a" / f"{name}.jsonl").read_text() == (tmp_path / "b" / f"{name}.jsonl").read_text()
    assert (tmp_path / "a" / "train.jsonl").read_text() != (tmp_path / "c" / "train.jsonl").read_text()
    scenes = {n: {r["scene_name"] for r in rows} for n, rows in _splits(tmp_path / "a").items()}
    n = questions_only["vsi_scenes"] + questions_only["urban_flights"]
    assert tuple(len(scenes[s]) for s in data.SPLITS) == data.split_sizes(n) == (12, 1, 4)
