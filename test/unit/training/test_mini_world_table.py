"""The mini world's results table: accuracy, the judge's consistency and the rule-based
check that the answer's letter is the option the reasoning names."""

from __future__ import annotations

from embodied_r_ros.sample_data.questions import format_question
from embodied_r_training.mini_world.run import _row, results_table

Q = format_question("Is the red box to my left, right, or back?", ["right", "back", "left"])


def _prediction(qid: str, completion: str, letter: str, *, correct: bool, consistent: bool = False) -> dict:
    return {"Question_id": qid, "question_category": "object_rel_direction", "letter": letter,
            "completion": completion, "score": float(correct), "correct": correct, "well_formed": True,
            "consistent": consistent}


def test_row_counts_letters_that_follow_the_reasoning() -> None:
    predictions = [
        _prediction("q1", "<think>The red box was left in frame 0. So now it is to my left.</think><answer>C</answer>",
                    "C", correct=True, consistent=True),
        _prediction("q2", "<think>So now it is to my left.</think><answer>A</answer>", "A", correct=False),
        _prediction("q3", "<think>So now it is to my back.</think><answer>B</answer>", "B", correct=False),
        _prediction("q4", "<think>I cannot tell.</think><answer>A</answer>", "A", correct=False),
    ]
    row = _row({}, predictions, {f"q{i}": Q for i in range(1, 5)})
    assert row["overall"] == 25.0 and row["n"] == 4
    assert row["consistency_rate"] == 100.0  # the judge's view: one correct answer, judged consistent
    assert row["names_option"] == 75.0  # q4 names no option
    assert round(row["follows_reasoning"], 1) == 66.7  # q1 and q3 follow, q2 answers A after naming "left"
    assert "follows_reasoning" not in _row({}, predictions)  # without the questions: not computed
    table = results_table({"(x) model": row}, ["(x) model"])
    header, _, line = table.splitlines()
    assert header.endswith("| consistent | letter = reasoning's option |")
    assert line.endswith("| 100.0 | 66.7 |") and line.count("|") == header.count("|")
