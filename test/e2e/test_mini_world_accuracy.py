"""End to end by accuracy: the shipped mini-world models through the real node graph.

Held-out rooms of the mini world (never seen in training) are written as rosbags with
their /odom; the replay evaluator starts the installed node executables (as `make demo`
and `embodied-r replay-eval --mode live` do), publishes each bag over DDS, and asks every
question through the AskSpatial service: key frames, perception, odometry, memory and
reasoning all run as on the robot.

What is held to a bar, set from measured values with room for noise (docs/mini_world.md):
- the shipped reasoning model's accuracy over chance (REASONING_MARGIN), so a regression
  anywhere in key frames, perception, odometry, memory or reasoning shows as lost accuracy;
- its letter is the option its own reasoning names (FOLLOWS_BAR);
- the descriptions the graph produced name the objects in view of each key frame
  (against the renderer's labels of that frame): RECALL_BAR;
- the worked reasoning's rule-based reading of those descriptions (row h of the results
  table) is printed beside chance and must be above it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from embodied_r_ros import replay_eval
from embodied_r_ros.evaluation import models as model_setup
from embodied_r_ros.sample_data.world import WorldConfig, write_room_sample

from helpers.env import fresh_ros_domain

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not model_setup.mini_world_available(),
                       reason="mini-world checkpoints not shipped (embodied-r-train mini-world --ship)"),
]

# Test rooms replayed (indices among the world's test rooms).
ROOMS = (2, 3, 4)
# The shipped reasoning model must beat chance by this many percentage points. Measured on
# these rooms: 48.0% (12 of 25, as with the model shipped before) against chance 29.0%,
# i.e. +19 points; the bar (35%, 9 of 25) leaves room for three answers changing
# (key-frame timing over DDS).
REASONING_MARGIN = 6.0
# Share (%) of the objects in view that the graph's descriptions name. Measured: 50.0%
# (16 of 32 objects over 27 key frames; 68.8% with the previous perception model); the
# bar leaves room for three objects.
RECALL_BAR = 40.0
# Share (%) of the reasoning model's answers whose letter is the option its reasoning's
# decision names (of those naming one). Measured: 90.0% (18 of 20; 100%, 18 of 18, with the
# model shipped before); chance about 30%.
FOLLOWS_BAR = 60.0


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three held-out rooms replayed live through the graph once: results and episodes."""
    tmp_path = tmp_path_factory.mktemp("mini_world_replay")
    world = WorldConfig()
    first_test = world.n_train + world.n_val
    bags = tmp_path / "bags"
    questions = []
    for k in ROOMS:
        _, qpath = write_room_sample(bags, first_test + k, world, name=f"room{k}")
        questions += json.loads(qpath.read_text())
        qpath.unlink()
    qfile = tmp_path / "questions.json"
    qfile.write_text(json.dumps(questions))
    overrides = model_setup.mini_world_overrides()
    sets = [f"{k}={v}" for k, v in overrides.items() if not k.endswith(".model")]
    fresh_ros_domain()
    out = tmp_path / "eval.json"
    code = replay_eval.main([
        "--bag", str(bags), "--questions", str(qfile), "--mode", "live", "--quiet-nodes",
        "--perception-model", overrides["perception.model"],
        "--reasoning-model", overrides["reasoning.model"],
        *[arg for s in sets for arg in ("--set", s)],
        "--set", "camera.reliability=reliable", "--set", "camera.depth=50",
        "--rate", "4", "--out", str(out), "--artifacts", str(tmp_path / "artifacts"),
    ])
    assert code == 0
    read = [json.loads(line) for line in out.with_suffix(".results.jsonl").read_text().splitlines() if line]
    episodes = [json.loads(line) for line in out.with_suffix(".episodes.jsonl").read_text().splitlines() if line]
    return {"questions": questions, "results": read, "episodes": episodes, "world": world}


def test_perception_through_the_graph_names_the_objects_in_view(replay: dict[str, Any]) -> None:
    """Every key frame the graph described, against the renderer's labels of that very
    frame: the share of objects in view that the description names, and the motion taken
    from /odom (perception.use_odometry) for every later key frame."""
    from embodied_r_ros.sample_data.captions import first_caption, frame_objects
    from embodied_r_ros.sample_data.world import render_room
    from embodied_r_training.mini_world.vlm_sft import parse_objects

    world = replay["world"]
    first_test = world.n_train + world.n_val
    truth_n = named = described = 0
    for k, episode in zip(ROOMS, sorted(replay["episodes"], key=lambda e: e["bag"])):
        clip = render_room(first_test + k, world)
        assert clip.labels is not None
        names = [o.name for o in clip.objects]
        source = {kf["index"]: kf["source_index"] for kf in episode["keyframes"]}
        for d in episode["descriptions"]:
            truth = parse_objects(first_caption(frame_objects(clip.labels[source[d["index"]]], names)))
            got = parse_objects(d["observation"])
            truth_n += len(truth)
            named += sum(name in truth for name in got)
            described += 1
            if d["index"] > 0:
                assert d["action_source"] == "odometry", d
    recall = 100.0 * named / max(truth_n, 1)
    print(f"object recall through the graph {recall:.1f}% over {described} key frames ({truth_n} objects)")
    assert described >= 3 * len(ROOMS)
    assert recall >= RECALL_BAR, f"object recall {recall:.1f}% < {RECALL_BAR}%"


def _graph_frames(episode: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"index": d["index"], "action": d["action"] or None, "observation": d["observation"]}
            for d in sorted(episode["descriptions"], key=lambda d: d["index"])]


def test_what_the_graph_saw_answers_above_chance(replay: dict[str, Any]) -> None:
    """Accuracy of the worked reasoning's rule-based reading (row h of the table) over the
    descriptions the graph produced and published, printed beside chance. Measured: 33.0%
    against chance 29.0% on these rooms with the shipped perception model (42.3% with the
    previous one; 47.0% over the 40 rooms of the table), too close to chance for a margin
    on 25 questions: the margin is held by the reasoning model (next test)."""
    from embodied_r_ros.core.prompts.reasoning import parse_choices
    from embodied_r_training.mini_world import worked

    frames_of = {e["bag"]: _graph_frames(e) for e in replay["episodes"]}
    bag_of = {r["question_id"]: r["bag"] for r in replay["results"]}
    score = chance = 0.0
    for q in replay["questions"]:
        choices = [text for _, text in parse_choices(q["question"])]
        got = worked.read(q["question"], worked.parse_frames(frames_of[bag_of[q["Question_id"]]]))
        k = worked.match_option(got[1], choices) if got else None
        score += (1.0 / len(choices)) if k is None else float("ABCDEFGH"[k] == q["answer"])
        chance += 1.0 / len(choices)
    n = len(replay["questions"])
    accuracy, chance = 100.0 * score / n, 100.0 * chance / n
    print(f"rule-based reading of the graph's descriptions: {accuracy:.1f}% on {n} questions; chance {chance:.1f}%")
    # Strictly above: descriptions that name nothing make every answer a guess (= chance).
    assert accuracy > chance, f"accuracy {accuracy:.1f}% not above chance {chance:.1f}%"


def test_shipped_reasoning_model_answers_above_chance(replay: dict[str, Any]) -> None:
    """The reasoning model's answers through the graph: one per question, each a
    `<think>...</think><answer>X</answer>` with X one of the question's letters, graded
    against the truth: accuracy at least REASONING_MARGIN points above chance."""
    rows = replay["results"]
    questions = replay["questions"]
    graded = [r for r in rows if r.get("correct") is not None]
    assert len(graded) == len(questions) >= 15
    accuracy = 100.0 * sum(bool(r["correct"]) for r in graded) / len(graded)
    chance = 100.0 * sum(1.0 / len(r["choices"]) for r in graded) / len(graded)
    print(f"accuracy {accuracy:.1f}% on {len(graded)} held-out questions; chance {chance:.1f}%")
    assert all(r["success"] and r["answer"] and r["answer"] in "ABCDEFGH"[: len(r["choices"])]
               for r in graded), graded
    assert accuracy >= chance + REASONING_MARGIN, \
        f"accuracy {accuracy:.1f}% vs chance {chance:.1f}% + {REASONING_MARGIN}"


def test_shipped_reasoning_model_letter_follows_its_reasoning(replay: dict[str, Any]) -> None:
    """Think-answer agreement through the graph, by rule (`worked.named_option`): of the
    answers whose reasoning's decision names one option in the option's words, the share
    whose letter is that option's must reach FOLLOWS_BAR (by chance about 30%), and most
    reasonings must name one. This is what the option scan taught the reasoning model."""
    from embodied_r_training.mini_world import worked

    rows = [r for r in replay["results"] if r.get("correct") is not None]
    named = follows = 0
    for r in rows:
        agrees = worked.letter_follows(str(r.get("reasoning") or ""), list(r["choices"]), r["answer"])
        if agrees is not None:
            named += 1
            follows += agrees
    share = 100.0 * follows / max(named, 1)
    print(f"letter = reasoning's option in {follows} of {named} answers naming one ({share:.1f}%); "
          f"{named} of {len(rows)} name one")
    assert 2 * named >= len(rows), f"only {named} of {len(rows)} reasonings name an option"
    assert share >= FOLLOWS_BAR, f"letter follows the reasoning in {share:.1f}% < {FOLLOWS_BAR}%"
