"""The think-answer consistency judge, shared by training and the robot.

A frozen reference model reads the question with its choices and the reasoning text
only (no video description) and replies with one letter (docs/method.md §5; reference
settings: temperature 0.1, at most 10 new tokens). Training turns agreement with the
policy's (correct) answer into the consistency reward (`embodied_r_training.rewards.ConsistencyReward`);
the robot can run the same judge after answering (`qa.self_check`) and flag an answer
whose reasoning supports another option.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from embodied_r_ros.core.backends.base import Reasoner
from embodied_r_ros.core.prompts.prompt_set import PromptSet
from embodied_r_ros.core.prompts.reasoning import build_consistency_messages, parse_choices
from embodied_r_ros.core.qa.answer_parser import DEFAULT_LETTERS, extract_choice_letter_reply
from embodied_r_ros.core.types import ChatMessage, GenerationSettings

JUDGE_SETTINGS = GenerationSettings(temperature=0.1, max_new_tokens=10)

# Outcomes of a self-check, as carried by answers.
NOT_RUN, CONSISTENT, INCONSISTENT, UNAVAILABLE = "", "consistent", "inconsistent", "unavailable"


def judge_messages(question_text: str, think_text: str,
                   prompts: PromptSet | None = None) -> list[ChatMessage]:
    return build_consistency_messages(question_text, think_text, prompts)


def valid_letters(question_text: str) -> str:
    return "".join(letter for letter, _ in parse_choices(question_text)) or DEFAULT_LETTERS


def read_judge_letter(reply: str, question_text: str) -> str | None:
    """The judge's letter in its reply, among the question's options; None if none."""
    return extract_choice_letter_reply(reply, valid_letters(question_text))


@dataclass(frozen=True)
class SelfCheck:
    outcome: str  # CONSISTENT, INCONSISTENT or UNAVAILABLE
    letter: str = ""  # the judge's letter ("" when it gave none)
    detail: str = ""


def self_check(judge: Reasoner, question_text: str, think_text: str, answer_letter: str, *,
               prompts: PromptSet | None = None, settings: GenerationSettings = JUDGE_SETTINGS,
               should_stop: Callable[[], bool] | None = None) -> SelfCheck:
    """Re-derive the letter from the reasoning alone and compare it with the answer."""
    if not think_text.strip():
        return SelfCheck(UNAVAILABLE, detail="the answer has no reasoning to check")
    try:
        reply = judge.generate(judge_messages(question_text, think_text, prompts), settings,
                               should_stop=should_stop)
    except Exception as exc:  # noqa: BLE001 - the answer stands; the check is reported
        return SelfCheck(UNAVAILABLE, detail=f"the self-check model failed: {exc}")
    letter = read_judge_letter(reply, question_text)
    if letter is None:
        return SelfCheck(UNAVAILABLE, detail=f"the self-check model gave no letter: {reply!r}")
    return SelfCheck(CONSISTENT if letter == answer_letter else INCONSISTENT, letter)
