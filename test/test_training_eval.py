"""Evaluation (accuracy per category, consistency, length) and training plots."""

from __future__ import annotations

import json

import pytest

from embodied_r_training import data
from embodied_r_training.evaluate import results_markdown, score
from embodied_r_training.perception_cache import build_record
from embodied_r_training.plots import plot_training


def _record(qid, category, answer, n_choices=4):
    choices = "\n".join(f"{'ABCD'[i]}. option {i}" for i in range(n_choices))
    base = {"Question_id": qid, "video_id": "v.mp4", "question_category": category,
            "question": f"Question: Which one?\nChoices:\n{choices}", "answer": answer,
            "scene_name": "v", "dataset": "toy", "video_path": "v.mp4", "source_category": category}
    return build_record(base, "on_query", {"source_frames": [0, 3]}, ["A desk ahead.", "1. move left\n2. A door.\n3. none"])


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
    from embodied_r_ros.core.rewards import ConsistencyReward

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
    assert {label for label, _ in panels["validation split (every eval_steps)"]} == {"weighted total", "format", "accuracy"}
    assert dict(panels["mean completion length"])["validation"] == [5, 10, 15, 20]
    assert len(dict(panels["learning rate"])["learning rate"]) == 20
