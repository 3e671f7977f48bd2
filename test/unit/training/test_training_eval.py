"""Evaluation (accuracy per category, consistency, length) and training plots."""

from __future__ import annotations

import json

import pytest

from embodied_r_training import data
from embodied_r_training.evaluate import mean_relative_accuracy, numeric_prediction, results_markdown, score
from embodied_r_training.perception_cache import build_record
from embodied_r_training.plots import plot_training


def _record(qid, category, answer, n_choices=4, source=None):
    choices = "\n".join(f"{'ABCD'[i]}. option {i}" for i in range(n_choices))
    base = {"Question_id": qid, "video_id": "v.mp4", "question_category": category,
            "question": f"Question: Which one?\nChoices:\n{choices}", "answer": answer,
            "scene_name": "v", "dataset": "toy", "video_path": "v.mp4", "source_category": source or category,
            "answer_type": "choice"}
    return build_record(base, "on_query", {"source_frames": [0, 3]},
                        ["A desk ahead.", "1. move left\n2. A door.\n3. none"])


def _numeric(qid, qtype, answer):
    base = {"Question_id": qid, "video_id": "v.mp4", "question_category": qtype,
            "question": "Question: How many chairs are in the room?", "answer": answer, "scene_name": "v",
            "dataset": "scannet", "video_path": "scannet/v.mp4", "source_category": qtype, "answer_type": "numeric"}
    return build_record(base, "on_query", {"source_frames": [0, 3]},
                        ["A desk ahead.", "1. move left\n2. A door.\n3. none"])


class ScriptedReasoner:
    """Replies with a fixed letter whatever it is asked (a stand-in reference model)."""

    name = "scripted"

    def __init__(self, reply):
        self.reply = reply
        self.calls = 0

    def generate(self, messages, settings=None, on_text=None, should_stop=None):
        self.calls += 1
        return self.reply

    def generate_batch(self, conversations, settings=None):
        return [self.generate(c, settings) for c in conversations]

    def close(self):
        pass


def test_score_counts_accuracy_consistency_and_words():
    from embodied_r_training.rewards import ConsistencyReward

    records = [_record("q1", "route_planning", "A"), _record("q2", "route_planning", "B"),
               _record("q3", "obj_appearance_order", "A"), _record("q4", "landmark_position", "C")]
    completions = [
        "<think>the door was on the left</think><answer>A</answer>",   # correct, judge agrees
        "<think>it must be the first</think><answer>A</answer>",       # wrong
        "<think>I saw it first</think><answer>A. option 0</answer>",   # correct, judge agrees
        "<think>far away</think><answer>C</answer>",                   # correct, judge says A
    ]
    judge = ScriptedReasoner("A")
    metrics, rows = score(records, completions, consistency=ConsistencyReward(judge, max_workers=1))
    assert metrics["n"] == 4
    assert metrics["accuracy"] == {"landmark_position": 100.0, "route_planning": 50.0, "obj_appearance_order": 100.0}
    assert metrics["accuracy_avg"] == 75.0
    assert metrics["macro_avg"] == pytest.approx(250 / 3)
    assert metrics["consistency"] == {"consistent": 2, "correct": 3, "rate_of_correct": pytest.approx(200 / 3),
                                      "rate_of_all": 50.0}
    assert judge.calls == 3  # only correct answers go to the reference model
    assert metrics["length_unit"] == "words"
    assert metrics["mean_completion_length"] == pytest.approx(sum(len(c.split()) for c in completions) / 4)
    assert [r["letter"] for r in rows] == ["A", "A", "A", "C"]
    assert [r["consistent"] for r in rows] == [True, False, True, False]

    table = results_markdown(metrics, "toy")
    lines = table.splitlines()
    assert lines[0].startswith("| method | avg | landmark pos. | counterfactual |")
    assert "| Embodied-R (paper) | 51.1 | 55.1 | 59.9 | 39.7 | 47.6 | 50.0 | 44.3 | 36.8 | 72.0 |" in lines
    assert "| **toy (ours)** | 75.0 | 100.0 | - | - | - | - | - | 50.0 | 100.0 |" in lines
    assert "2/3 correct answers = 66.7%" in table


@pytest.mark.parametrize("prediction, target, expected", [
    (10, 10, 1.0),      # exact: every threshold
    (9.1, 10, 0.9),     # error 0.09 <= 1 - t for t = 0.50 .. 0.90
    (13.3, 10, 0.4),    # error 0.33: t = 0.50, 0.55, 0.60, 0.65
    (5.8, 10, 0.2),     # error 0.42: t = 0.50, 0.55
    (5, 10, 0.1),       # error 0.5 = 1 - 0.50: "at most" counts it
    (4, 10, 0.0),       # error 0.6: no threshold
    (16.2, 10, 0.0),
    (8, 10, 0.6),       # error 0.2 vs 1 - 0.8 = 0.19999999999999996 in floating point, as VSI-Bench
    (None, 3, 0.0),     # no number in the answer
])
def test_mean_relative_accuracy_worked_values(prediction, target, expected):
    assert mean_relative_accuracy(prediction, target) == pytest.approx(expected)


def test_numeric_prediction_reads_the_first_number():
    assert numeric_prediction("3") == 3.0 and numeric_prediction("about 12.5 m") == 12.5
    assert numeric_prediction("3.") == 3.0 and numeric_prediction("none") is None


def test_paper_table_and_vsi_bench_way_on_worked_values():
    """Relative direction: easy 2/2, medium 1/2, hard 0/1. Pooled (the paper): 3/5 = 60.
    VSI-Bench: mean of the levels (100 + 50 + 0) / 3 = 50. Numeric counting scored by MRA."""
    recs, comps = [], []

    def add(record, letter_or_text):
        recs.append(record)
        comps.append(f"<think>looked around</think><answer>{letter_or_text}</answer>")

    add(_record("e1", "object_rel_direction", "A", 3, "object_rel_direction_easy"), "A")
    add(_record("e2", "object_rel_direction", "B", 3, "object_rel_direction_easy"), "B")
    add(_record("m1", "object_rel_direction", "A", 3, "object_rel_direction_medium"), "A")
    add(_record("m2", "object_rel_direction", "C", 3, "object_rel_direction_medium"), "A")
    add(_record("h1", "object_rel_direction", "B", 3, "object_rel_direction_hard"), "C")
    add(_record("d1", "object_rel_distance", "D"), "D")
    add(_record("d2", "object_rel_distance", "A"), "B")
    add(_record("u1", "landmark_position", "C"), "C")  # UrbanVideo: in the paper's table only
    add(_numeric("n1", "object_counting", "10"), "9.1")
    add(_numeric("n2", "object_counting", "10"), "about 5.8 chairs")
    add(_numeric("n3", "room_size_estimation", "20"), "twenty")  # no number: 0
    metrics, rows = score(recs, comps)
    assert metrics["n"] == 8 and metrics["n_numeric"] == 3
    assert metrics["accuracy"]["object_rel_direction"] == pytest.approx(60.0)
    assert metrics["accuracy"]["object_rel_distance"] == pytest.approx(50.0)
    assert metrics["accuracy_avg"] == pytest.approx(100 * 5 / 8)
    vsi = metrics["vsi_bench"]
    assert vsi["per_type"]["object_rel_direction_easy"] == 100.0
    assert vsi["per_type"]["object_rel_direction_medium"] == 50.0
    assert vsi["per_type"]["object_rel_direction_hard"] == 0.0
    assert vsi["tasks"]["object_rel_direction"] == pytest.approx(50.0)
    assert vsi["tasks"]["object_rel_distance"] == pytest.approx(50.0)
    assert vsi["tasks"]["object_counting"] == pytest.approx(100 * (0.9 + 0.2) / 2)
    assert vsi["tasks"]["room_size_estimation"] == 0.0
    assert vsi["overall"] == pytest.approx((55.0 + 0.0 + 50.0 + 50.0) / 4)
    assert "landmark_position" not in vsi["per_type"]
    assert [r["score"] for r in rows if r["answer_type"] == "numeric"] == pytest.approx([0.9, 0.2, 0.0])
    table = results_markdown(metrics, "toy")
    assert "| **toy (ours)** | 62.5 | 100.0 | - | - | - | 50.0 | 60.0 | - | - |" in table
    assert ("| method | avg | obj. count | abs. dist. | obj. size | room size | rel. dist. | rel. dir. "
            "| route plan | appr. order |") in table
    assert "| **toy (ours)** | 38.8 | 55.0 | - | - | 0.0 | 50.0 | 50.0 | - | - |" in table
    assert "| questions (ours) | 10 | 2 | 0 | 0 | 1 | 2 | 5 | 0 | 0 |" in table
    assert "easy 100.0, medium 50.0, hard 0.0" in table


def test_evaluate_cli_with_the_tiny_lm(tiny_models, tmp_path):
    from embodied_r_training.cli import main

    records = [_record(f"q{i}", ("route_planning", "counterfactual")[i % 2], "ABCD"[i % 4]) for i in range(4)]
    data.write_jsonl_atomic(tmp_path / "test.jsonl", records)
    argv = ["evaluate", "--config", "eval_tiny.yaml", "--records", str(tmp_path / "test.jsonl"),
            "--out", str(tmp_path / "eval"), "--name", "tiny", "--no-progress",
            "--set", f"reasoning_model.model={tiny_models.lm}", "--set", "reasoning_model.max_new_tokens=8",
            "--set", f"consistency_model.model={tiny_models.lm}"]
    assert main(argv) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["n"] == 4 and metrics["length_unit"] == "tokens"
    assert metrics["mean_completion_length"] > 0
    assert set(metrics["accuracy"]) == {"route_planning", "counterfactual"}
    assert "consistency" in metrics
    predictions = data.read_jsonl(tmp_path / "eval" / "predictions.jsonl")
    assert [p["Question_id"] for p in predictions] == ["q0", "q1", "q2", "q3"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models.lm)
    lengths = [len(tok(p["completion"], add_special_tokens=False)["input_ids"]) for p in predictions]
    assert [p["length"] for p in predictions] == lengths
    assert metrics["mean_completion_length"] == pytest.approx(sum(lengths) / 4)
    assert "**tiny (ours)**" in (tmp_path / "eval" / "results.md").read_text()


def test_plot_from_trainer_state(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = []
    for step in range(1, 21):
        history.append({"step": step, "epoch": step / 10, "reward": 0.3 + step / 40,
                        "rewards/format/mean": min(1.0, step / 10), "rewards/accuracy/mean": step / 30,
                        "reward_weight/format": 0.7 if step <= 10 else 0.3,
                        "reward_weight/accuracy": 0.3 if step <= 10 else 0.7,
                        "kl": step * 1e-3, "completions/mean_length": 200 - 5 * step,
                        "learning_rate": 5e-7 * min(1.0, step / 2)})
        if step % 5 == 0:  # validation entries, as TRL logs them every eval_steps
            history.append({"step": step, "eval_reward": step / 25, "eval_rewards/accuracy/mean": step / 40,
                            "eval_rewards/format/mean": step / 20, "eval_completions/mean_length": 150.0})
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": history + [{"step": 20, "train_runtime": 1.0}]}))
    drawn = []
    real_savefig = plt.Figure.savefig

    def spy(fig, *args, **kwargs):
        drawn.append({ax.get_title(): [(line.get_label(), list(line.get_xdata())) for line in ax.get_lines()]
                      for ax in fig.axes})
        return real_savefig(fig, *args, **kwargs)

    plt.Figure.savefig = spy
    try:
        (png,) = plot_training(state)
    finally:
        plt.Figure.savefig = real_savefig
    assert png.name == "training_curves.png"
    raw = png.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 20_000
    import matplotlib.image as mpimg

    assert mpimg.imread(png).shape[:2] == (825, 1650)
    panels = drawn[0]
    assert dict(panels["accuracy reward"])["validation split"] == [5, 10, 15, 20]
    assert len(dict(panels["accuracy reward"])["training batches"]) == 20
    assert {label for label, _ in panels["validation split (every eval_steps)"]} == {
        "weighted total", "format", "accuracy"}
    assert dict(panels["mean completion length"])["validation"] == [5, 10, 15, 20]
    assert len(dict(panels["learning rate"])["learning rate"]) == 20
