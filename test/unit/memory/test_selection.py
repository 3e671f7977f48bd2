"""Question-time selection (core/memory/selection.py), time hints, evidence, and the
paper's prompt for an episode that fits in 32 key frames."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied_r_ros.core.memory.evidence import best_evidence, build_evidence, frames_named
from embodied_r_ros.core.memory.long_term import (
    LongTermMemory,
    MemorySettings,
    answer_with_memory,
)
from embodied_r_ros.core.memory.selection import select_keyframes
from embodied_r_ros.core.memory.store import MEMORY, KeyFrameRecord, MemoryStore, StoredPose
from embodied_r_ros.core.memory.time_hints import TimeHint, format_age, parse_time_hints
from embodied_r_ros.core.prompts.reasoning import format_question
from embodied_r_ros.core.qa.answerer import QuestionAnswerer
from embodied_r_ros.core.types import FrameDescription, GenerationSettings

from helpers.scripted_models import ScriptedReasoner

OBJECTS = {30: "a red fire extinguisher on the wall", 31: "a red fire extinguisher, closer",
           70: "a yellow bicycle leaning on a pillar", 150: "a silver piano in a lobby"}


def long_store(n: int = 200, period_s: float = 3.0) -> MemoryStore:
    store = MemoryStore(MEMORY, background=False)
    store.write_many(KeyFrameRecord("ep", i, 1000.0 + period_s * i,
                                    f"a grey corridor with doors. {OBJECTS.get(i, '')}",
                                    "move forward" if i else None,
                                    pose=StoredPose(float(i), 0.0, 0.0, 0.0, "odom"))
                     for i in range(n))
    return store


def test_relevant_finds_the_one_stretch_even_spread_misses() -> None:
    store = long_store()
    question = "Where did I see the fire extinguisher?"
    relevant = select_keyframes(store, "ep", question, max_keyframes=8, mode="relevant")
    even = select_keyframes(store, "ep", question, max_keyframes=8, mode="even")
    assert {30, 31} <= set(relevant.indices)
    assert not {30, 31} & set(even.indices)
    for sel in (relevant, even):
        assert len(sel.indices) == 8 and sel.indices == sorted(sel.indices)
        assert sel.indices[0] == 0 and sel.indices[-1] == 199 and sel.trimmed
    assert relevant.reasons[0] == "first" and relevant.reasons[199] == "recent"
    assert relevant.reasons[30] == "relevant"
    assert [196, 197, 198, 199] == relevant.indices[-4:]


def test_time_hints_point_to_the_start_the_past_and_now() -> None:
    assert parse_time_hints("what was at the start?") == [TimeHint("start")]
    assert parse_time_hints("What did I pass two minutes ago?") == [TimeHint("ago", 120.0)]
    assert parse_time_hints("what is there just now") == [TimeHint("recent")]
    assert parse_time_hints("where was I half an hour ago") == [TimeHint("ago", 1800.0)]
    assert parse_time_hints("where is the door") == []
    assert format_age(42) == "42 s" and format_age(720) == "12 min"
    assert format_age(7500) == "2 h 5 min"
    store = long_store()  # key frames every 3 s; the newest (199) is "now"
    ago = select_keyframes(store, "ep", "What did I pass five minutes ago?", max_keyframes=12)
    assert 99 in ago.indices and ago.reasons[99] == "time"  # 199 - 300 s / 3 s
    start = select_keyframes(store, "ep", "What did I see at the beginning?", max_keyframes=12)
    assert {1, 2, 3, 4, 5} <= set(start.indices)


def test_selection_stops_at_the_question_s_last_key_frame() -> None:
    store = long_store()
    sel = select_keyframes(store, "ep", "the silver piano", max_keyframes=8, last_index=120,
                           exact_total=True)
    assert max(sel.indices) == 120 and 150 not in sel.indices and sel.total == 121


def descriptions(n: int) -> list[FrameDescription]:
    return [FrameDescription(i, f"view {i} with {OBJECTS.get(i, 'a wall')}",
                             "turn left" if i else None, stamp_s=50.0 + 2 * i, episode_id="ep")
            for i in range(n)]


def prompt_through_memory(mode: str, items: list[FrameDescription], question: str) -> str:
    memory = LongTermMemory(MemorySettings(path=MEMORY, selection=mode, max_keyframes=32))
    for d in items:
        memory.record(d)
    reasoner = ScriptedReasoner("<think>Frame 1 shows it.</think><answer>A</answer>")
    answerer = QuestionAnswerer(reasoner, GenerationSettings(), max_keyframes=32)
    text = format_question(question, ["left", "right"])
    result = answer_with_memory(memory, answerer, text, question, ["left", "right"],
                                episode_id="ep", last_index=len(items) - 1, collected=items)
    assert result.success, result.message
    memory.close()
    return str(reasoner.calls[0])


@pytest.mark.parametrize("n", [1, 7, 32])
def test_an_episode_that_fits_gets_the_paper_prompt_in_both_modes(n: int) -> None:
    items = descriptions(n)
    question = "Where did I see the fire extinguisher?"
    reasoner = ScriptedReasoner("<answer>A</answer>")
    QuestionAnswerer(reasoner, GenerationSettings(), max_keyframes=32).answer(
        format_question(question, ["left", "right"]), items)
    paper = str(reasoner.calls[0])
    assert prompt_through_memory("even", items, question) == paper
    assert prompt_through_memory("relevant", items, question) == paper
    assert " ago:" not in paper


def test_a_longer_episode_gets_ages_and_the_relevant_frames() -> None:
    items = descriptions(100)
    question = "Where did I see the fire extinguisher?"
    relevant = prompt_through_memory("relevant", items, question)
    even = prompt_through_memory("even", items, question)
    assert relevant != even
    assert "red fire extinguisher on the wall" in relevant
    assert "red fire extinguisher on the wall" not in even
    assert "Frame 0, 3 min ago: Observe:" in relevant  # (99 - 0) * 2 s = 198 s
    assert " ago:" not in even


def test_evidence_names_frames_and_points_to_the_best_pose() -> None:
    assert frames_named("Frame 3 shows a door; frames 5 and 7 too. frame 99", 8) == [3, 5, 7]
    records = [KeyFrameRecord("ep", 10 * i, 100.0 + i, f"obs {i}",
                              pose=StoredPose(i, 0.0) if i != 5 else None) for i in range(8)]
    items = build_evidence(records, "I saw it in Frame 3 and Frame 5", {30: 0.2, 60: 0.9})
    assert [e.position for e in items if e.named] == [3, 5]
    assert items[3].keyframe_index == 30 and items[3].stamp_s == 103.0
    best = best_evidence(items, "I saw it in Frame 3 and Frame 5")
    assert best is not None and best.keyframe_index == 30  # frame 5 has no pose
    unnamed = build_evidence(records, "no frame mentioned", {30: 0.2, 60: 0.9})
    assert best_evidence(unnamed) is not None and best_evidence(unnamed).keyframe_index == 60  # type: ignore[union-attr]
    assert best_evidence(build_evidence(records, "nothing")) is None


def test_answers_carry_evidence_with_stamps_and_poses(tmp_path: Path) -> None:
    memory = LongTermMemory(MemorySettings(path=str(tmp_path / "m.sqlite"), max_keyframes=8),
                            pose_source=lambda stamp: StoredPose(stamp, 1.0, 0.0, 0.0, "odom"))
    items = descriptions(60)
    for d in items:
        memory.record(d)
    reasoner = ScriptedReasoner("<think>Frame 2 shows the extinguisher.</think><answer>A</answer>")
    answerer = QuestionAnswerer(reasoner, GenerationSettings(), max_keyframes=8)
    question = "Where did I see the fire extinguisher?"
    result = answer_with_memory(memory, answerer, format_question(question, ["left", "right"]),
                                question, ["left", "right"], episode_id="ep", last_index=59,
                                collected=items[-20:])
    assert result.success and len(result.evidence) == 8
    named = [e for e in result.evidence if e.named]
    assert [e.position for e in named] == [2]
    assert named[0].keyframe_index in (30, 31)
    assert named[0].stamp_s == 50.0 + 2 * named[0].keyframe_index
    assert result.goal is not None and result.goal.pose is not None
    assert result.goal.pose.x == result.goal.stamp_s
    assert memory.store.flush(5)
    asked = memory.store.questions("ep")
    assert asked[0].question == question and asked[0].answer == "A"
    assert any(e["named"] for e in asked[0].evidence)
    memory.close()
