"""Data preparation: benchmark parquet/JSON -> filtered records -> scene-level splits."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from embodied_r_training import data
from embodied_r_training.categories import CATEGORIES, canonical_category
from embodied_r_training.toy import make_toy_benchmark


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return make_toy_benchmark(tmp_path_factory.mktemp("toy"), scenes=12, seed=3, videos=False)


def test_category_merging_and_dropping():
    for level in ("easy", "medium", "hard"):
        assert canonical_category(f"object_rel_direction_{level}") == "object_rel_direction"
    assert canonical_category("Landmark Position") == "landmark_position"
    assert canonical_category("Progress-Evaluation") == "progress_evaluation"
    assert canonical_category("object_counting") is None
    assert canonical_category("Object Recall") is None


def test_vsi_loader_letters_text_answers_and_drops(tmp_path):
    rows = [
        dict(id=1, dataset="scannet", scene_name="s1", question_type="object_rel_direction_hard",
             question="Is the door left or right of me?", options=["A. left", "B. right"], ground_truth="B"),
        dict(id=2, dataset="scannet", scene_name="s1", question_type="object_rel_distance",
             question="Which is closest to the bed?", options=["lamp", "sofa", "desk"], ground_truth="sofa"),
        dict(id=3, dataset="arkitscenes", scene_name="s2", question_type="object_counting",
             question="How many chairs?", options=[], ground_truth="4"),
        dict(id=4, dataset="arkitscenes", scene_name="s2", question_type="route_planning",
             question="Which way?", options=["A. left", "B. right"], ground_truth="a plane"),
    ]
    path = tmp_path / "vsi.parquet"
    pd.DataFrame(rows).to_parquet(path)
    drops: Counter = Counter()
    records = data.load_vsi(path, drops)
    assert [r["Question_id"] for r in records] == ["vsi_1", "vsi_2"]
    first, second = records
    assert first["question_category"] == "object_rel_direction"
    assert first["source_category"] == "object_rel_direction_hard"
    assert first["answer"] == "B"
    assert first["question"].startswith("Question: Is the door left or right of me?\nChoices:\nA. left\nB. right")
    assert first["video_path"] == "scannet/s1.mp4"
    assert second["answer"] == "B"  # option text "sofa" -> letter
    assert "B. sofa" in second["question"]
    assert drops == Counter({"category:object_counting": 1, "unmatched_answer": 1})


def test_urban_loader_reads_choices_inside_the_question(tmp_path):
    rows = [
        dict(Question_id=7, video_id="v1.mp4", question_category="Counterfactual",
             question="Question: If I had turned left, what would I see?\nChoices:\nA. a river\nB. a road",
             answer="A"),
        dict(Question_id=8, video_id="v1.mp4", question_category="Action Generation",
             question="What should I do next? A. fly up B. land C. turn right", answer="C."),
        dict(Question_id=9, video_id="v2.mp4", question_category="Object Recall",
             question="What did you see?\nA. car\nB. bus", answer="A"),
    ]
    path = tmp_path / "urban.parquet"
    pd.DataFrame(rows).to_parquet(path)
    drops: Counter = Counter()
    records = data.load_urban(path, drops)
    assert [r["Question_id"] for r in records] == ["urban_7", "urban_8"]
    assert records[0]["question"] == (
        "Question: If I had turned left, what would I see?\nChoices:\nA. a river\nB. a road"
    )
    assert records[1]["question"].endswith("Choices:\nA. fly up\nB. land\nC. turn right")
    assert records[1]["answer"] == "C"
    assert records[0]["scene_name"] == "v1" and records[0]["video_path"] == "v1.mp4"
    assert drops == Counter({"category:Object Recall": 1})


def test_records_format_is_accepted(tmp_path):
    demo = [
        {"Question_id": "word_infer", "video_id": "1ada7a0617.mp4", "question_category": "object_rel_direction",
         "question": "Please assume the role of an agent. The video represents your egocentric observations "
         "from the past to the present. Question: Is the door to my left, right, or back?\n\nChoices: \n"
         "A. left\nB. right\nC. back\n", "answer": "C"},
    ]
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo))
    records = data.load_records(path, Counter())
    assert len(records) == 1
    rec = records[0]
    assert rec["question"].startswith("Question: Is the door to my left, right, or back?")
    assert rec["question"].endswith("Choices:\nA. left\nB. right\nC. back")
    assert rec["answer"] == "C" and rec["scene_name"] == "1ada7a0617"
    # JSONL form of the same thing
    jsonl = tmp_path / "demo.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in demo) + "\n")
    assert data.load_records(jsonl, Counter()) == records


def test_prepare_split_is_by_scene_deterministic_and_counted(toy, tmp_path):
    out_a, out_b, out_c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    kwargs = dict(vsi=[toy["vsi"]], urban=[toy["urban"]], records=[toy["records"]])
    summary = data.prepare(out=out_a, seed=0, **kwargs)
    data.prepare(out=out_b, seed=0, **kwargs)
    data.prepare(out=out_c, seed=1, **kwargs)
    assert summary["kept"] == toy["expected_kept"]
    assert summary["dropped"]["category:object_counting"] == 12
    assert summary["dropped"]["category:Object Recall"] == 6
    assert summary["kept"] + summary["dropped_total"] == toy["n_vsi"] + toy["n_urban"] + 2

    splits = {name: data.read_jsonl(out_a / f"{name}.jsonl") for name in data.SPLITS}
    assert sum(len(v) for v in splits.values()) == summary["kept"]
    scenes = {name: {r["scene_name"] for r in rows} for name, rows in splits.items()}
    assert not scenes["train"] & scenes["val"]
    assert not scenes["train"] & scenes["test"]
    assert not scenes["val"] & scenes["test"]
    n_scenes = sum(len(s) for s in scenes.values())
    assert n_scenes == 12 + 6  # 12 VSI scenes + 6 drone clips (the records share drone_000)
    assert len(scenes["train"]) == round(0.75 * n_scenes)
    assert len(scenes["val"]) == round(0.05 * n_scenes)
    for rows in splits.values():
        for r in rows:
            assert r["question_category"] in CATEGORIES
            assert r["answer"] in "ABCD"
            assert r["question"].startswith("Question: ") and "\nChoices:\nA. " in r["question"]

    for name in data.SPLITS:  # same seed, same files; another seed, another split
        assert (out_a / f"{name}.jsonl").read_text() == (out_b / f"{name}.jsonl").read_text()
    assert (out_a / "train.jsonl").read_text() != (out_c / "train.jsonl").read_text()


def test_prepare_cli_with_video_check(tmp_path):
    toy = make_toy_benchmark(tmp_path / "toy", scenes=2, seed=0, videos=True)
    out = tmp_path / "out"
    from embodied_r_training.cli import main

    rc = main(["prepare", "--vsi", str(toy["vsi"]), "--urban", str(toy["urban"]), "--records",
               str(toy["records"]), "--video-root", str(toy["video_root"]), "--require-videos",
               "--out", str(out), "--seed", "0"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kept"] == toy["expected_kept"]  # every video exists
    assert "missing_video" not in summary["dropped"]
    (toy["video_root"] / "scannet" / "scene000.mp4").unlink()
    data.prepare(vsi=[toy["vsi"]], video_root=toy["video_root"], require_videos=True, out=out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dropped"]["missing_video"] == 6  # the six kept questions of scene000
