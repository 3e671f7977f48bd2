"""Pins the fixture files to the published schemas, so fixtures cannot drift from the data.

The expected names and types below are written out by hand from the datasets' published
descriptions (VSI-Bench dataset card and its newer revision's files; UrbanVideo-Bench's
MCQ.parquet field table), not taken from the writer under test. If `toy-data` (which the
tests and the dry run use) or the loaders' column lists change, this test fails.
"""

from __future__ import annotations

import json
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from embodied_r_training import data

from helpers.published_fixtures import make_published_tree

VSI_FIRST_RELEASE = [
    ("id", pa.int64()),
    ("dataset", pa.string()),
    ("scene_name", pa.string()),
    ("question_type", pa.string()),
    ("question", pa.string()),
    ("ground_truth", pa.string()),
    ("options", pa.list_(pa.string())),
]
VSI_NEWER = VSI_FIRST_RELEASE + [("pruned", pa.bool_())]
URBAN_MCQ = [
    ("Question_id", pa.int64()),
    ("video_id", pa.string()),
    ("question_category", pa.string()),
    ("question", pa.string()),
    ("answer", pa.string()),
]
VSI_DATASETS = {"arkitscenes", "scannet", "scannetpp"}
RECORD_FIELDS = {"Question_id", "video_id", "question_category", "question", "answer"}
RECORD_OPTIONAL = {"scene_name", "videos", "dataset"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_published_tree(tmp_path_factory.mktemp("schema"), vsi_scenes=3, seed=0)


def _fields(path):
    schema = pq.read_schema(path)
    return [(f.name, f.type) for f in schema]


def test_file_names_are_the_published_ones(tree):
    root = tree["root"]
    assert sorted(p.name for p in (root / "VSI-Bench").iterdir()) == [
        "arkitscenes.zip", "scannet.zip", "scannetpp.zip", "test-00000-of-00001.parquet",
        "test.jsonl", "test_debiased.parquet", "test_pruned.parquet"]
    assert sorted(p.name for p in (root / "UrbanVideo-Bench").iterdir()) == ["MCQ.parquet", "videos"]


def test_parquet_schemas(tree):
    assert _fields(tree["vsi_parquet"]) == VSI_FIRST_RELEASE
    assert _fields(tree["vsi_debiased"]) == VSI_NEWER
    assert _fields(tree["vsi_pruned"]) == VSI_NEWER
    assert _fields(tree["urban"]) == URBAN_MCQ
    # No pandas index column sneaks in.
    assert "__index_level_0__" not in pq.read_schema(tree["urban"]).names


def test_jsonl_rows_have_the_newer_columns_and_json_types(tree):
    rows = [json.loads(line) for line in tree["vsi_jsonl"].read_text().splitlines()]
    assert rows
    for row in rows:
        assert list(row) == [name for name, _ in VSI_NEWER]
        assert isinstance(row["id"], int) and isinstance(row["pruned"], bool)
        assert all(isinstance(row[k], str)
                   for k in ("dataset", "scene_name", "question_type", "question", "ground_truth"))
        assert row["options"] is None or (isinstance(row["options"], list)
                                          and all(isinstance(o, str) for o in row["options"]))
    numeric = [r for r in rows if r["options"] is None]
    assert numeric and all(r["question_type"] in ("object_counting", "room_size_estimation") for r in numeric)
    assert all(o[:3] in ("A. ", "B. ", "C. ", "D. ") for r in rows if r["options"] for o in r["options"])


def test_video_archives_and_folders(tree):
    table = pq.read_table(tree["vsi_parquet"]).to_pylist()
    assert {r["dataset"] for r in table} == VSI_DATASETS
    for dataset in VSI_DATASETS:
        with zipfile.ZipFile(tree["vsi_dir"] / f"{dataset}.zip") as zf:
            expected = {f"{dataset}/{r['scene_name']}.mp4" for r in table if r["dataset"] == dataset}
            assert set(zf.namelist()) == expected
    urban = pq.read_table(tree["urban"]).to_pylist()
    assert {p.name for p in tree["urban_videos"].iterdir()} == {r["video_id"] for r in urban}


def test_records_file_uses_the_record_format(tree):
    records = json.loads(tree["records"].read_text())
    for record in records:
        assert RECORD_FIELDS <= set(record) <= RECORD_FIELDS | RECORD_OPTIONAL
        assert all(isinstance(v, str) for v in record.values())
        assert "\n\nChoices: \nA. " in record["question"] and len(record["answer"]) == 1


def test_loaders_expect_exactly_the_published_columns():
    assert set(data.VSI_COLUMNS) == {name for name, _ in VSI_FIRST_RELEASE}
    assert data.VSI_PRUNED_COLUMN == "pruned"
    assert tuple(data.URBAN_COLUMNS) == tuple(name for name, _ in URBAN_MCQ)
    assert set(data.RECORD_COLUMNS) == RECORD_FIELDS
