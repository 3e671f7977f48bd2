"""The mini world's results table: accuracy, the judge's consistency and the rule-based
check that the answer's letter is the option the reasoning names."""

from __future__ import annotations

from embodied_r_ros.sample_data.questions import format_question
from embodied_r_training.mini_world.run import _row, paired_changes, paired_table, results_table

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


def _scored(qid: str, kind: str, right: bool) -> dict:
    return {"Question_id": qid, "question_category": kind, "score": float(right)}


def test_paired_changes_count_only_answers_that_changed_with_a_sign_test() -> None:
    old = [_scored("q1", "route_planning", False), _scored("q2", "route_planning", False),
           _scored("q3", "route_planning", True), _scored("q4", "route_planning", True),
           _scored("q5", "object_rel_direction", True)]
    new = [_scored("q1", "route_planning", True), _scored("q2", "route_planning", True),
           _scored("q3", "route_planning", True), _scored("q4", "route_planning", False),
           _scored("q5", "object_rel_direction", True), _scored("q9", "route_planning", True)]  # q9: not in old
    changes = paired_changes(new, old)
    assert changes["route_planning"] == {"gained": 2, "lost": 1, "p": 1.0}  # 2 of 3 changes: (1+3)/8, doubled
    assert changes["all"] == changes["route_planning"]
    assert "object_rel_direction" not in changes  # answered alike: no change to count
    lopsided = paired_changes([_scored(f"q{i}", "route_planning", True) for i in range(6)],
                              [_scored(f"q{i}", "route_planning", False) for i in range(6)])
    assert lopsided["all"]["p"] == 2 / 64  # six of six changes one way
    table = paired_table({"(c) vs (b)": changes})
    assert "| (c) vs (b) | +2/-1 (1.00) |" in table
    assert table.splitlines()[0] == "| comparison | all (p) | route plan |"  # only kinds with a change
