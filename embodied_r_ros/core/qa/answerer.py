"""Answering one spatial question from the episode memory with the reasoning model.

Builds the prompt from the frame descriptions (at most `max_keyframes` of them: first,
last, the rest sampled evenly), runs the Reasoner with a deadline and cancellation, and
parses the reply into think text, answer and option letter. Every outcome is an
`AnswerResult`; failures carry an ErrorCode and a message that says what to do.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from embodied_r_ros.core.backends.base import Reasoner, TextCallback
from embodied_r_ros.core.errors import (
    CancelledError,
    EmbodiedRError,
    ErrorCode,
    NoKeyFramesError,
    RequestTimeoutError,
)
from embodied_r_ros.core.keyframes.rules import apply_count_rule
from embodied_r_ros.core.memory.episode import render_video_text
from embodied_r_ros.core.memory.evidence import EvidenceItem
from embodied_r_ros.core.prompts.prompt_set import PromptSet
from embodied_r_ros.core.prompts.reasoning import (
    OPTION_LETTERS,
    build_reasoning_messages,
    parse_choices,
)
from embodied_r_ros.core.qa.answer_parser import parse_reasoning_output
from embodied_r_ros.core.qa.consistency import INCONSISTENT, UNAVAILABLE
from embodied_r_ros.core.qa.consistency import self_check as run_self_check
from embodied_r_ros.core.types import (
    ChatMessage,
    FrameDescription,
    GenerationSettings,
    TimingInfo,
)

LOG = logging.getLogger("embodied_r_ros.qa")


@dataclass
class AnswerResult:
    """Everything a service/action response carries (see srv/AskSpatial.srv)."""

    success: bool
    error_code: ErrorCode = ErrorCode.OK
    message: str = ""
    answer: str = ""
    answer_text: str = ""
    reasoning: str = ""
    raw_output: str = ""
    keyframes_used: int = 0
    episode_id: str = ""
    timing: TimingInfo = field(default_factory=TimingInfo)
    messages: list[ChatMessage] = field(default_factory=list)  # the exact LM input
    # qa.self_check: "" (not run), "consistent", "inconsistent" or "unavailable", and the
    # letter the check derived from the reasoning alone.
    self_check: str = ""
    self_check_letter: str = ""
    # The key frames the prompt held (named=True: the reasoning refers to them) and the
    # one to go to (None without poses); see core/memory/evidence.py.
    evidence: list[EvidenceItem] = field(default_factory=list)
    goal: EvidenceItem | None = None

    @classmethod
    def failure(cls, error: EmbodiedRError, **kwargs: object) -> AnswerResult:
        return cls(success=False, error_code=error.code, message=str(error), **kwargs)  # type: ignore[arg-type]


def select_for_prompt(descriptions: Sequence[FrameDescription],
                      max_keyframes: int) -> list[FrameDescription]:
    """Keep at most `max_keyframes` descriptions: first, last and an even middle."""
    n = len(descriptions)
    if n <= max_keyframes:
        return list(descriptions)
    keep = apply_count_rule(list(range(n)), n, min_keyframes=1, max_keyframes=max_keyframes)
    return [descriptions[i] for i in keep]


class QuestionAnswerer:
    """Reasoning step: memory text + question -> parsed answer."""

    def __init__(self, reasoner: Reasoner, settings: GenerationSettings, *,
                 max_keyframes: int = 32,
                 prompts: PromptSet | None = None,
                 self_check: Reasoner | None = None) -> None:
        self.prompts = prompts
        self.judge = self_check  # qa.self_check: the consistency judge, or None
        self.reasoner = reasoner
        self.settings = settings
        self.max_keyframes = max_keyframes

    def answer(self, question_text: str, descriptions: Sequence[FrameDescription], *,
               episode_id: str = "", deadline: float | None = None,
               on_text: TextCallback | None = None,
               should_stop: Callable[[], bool] | None = None,
               timing: TimingInfo | None = None,
               selected: bool = False, ages: Sequence[str] | None = None) -> AnswerResult:
        """Answer an already formatted question (`reasoning_prompts.format_question`).

        ``selected=True``: `descriptions` were already chosen (core/memory/selection.py)
        and are used as given, labelled with ``ages`` when given.
        """
        timing = timing or TimingInfo()
        if not descriptions:
            err = NoKeyFramesError("no key frame of this episode has been described yet; "
                                   "check that camera frames arrive on the camera topic and "
                                   "that the perception model is running")
            return AnswerResult.failure(err, episode_id=episode_id, timing=timing)
        used = list(descriptions) if selected else select_for_prompt(descriptions, self.max_keyframes)
        messages = build_reasoning_messages(render_video_text(used, self.prompts, ages),
                                            question_text, self.prompts)

        def stop() -> bool:
            if should_stop is not None and should_stop():
                return True
            return deadline is not None and time.monotonic() > deadline

        start = time.monotonic()
        try:
            raw = self.reasoner.generate(messages, self.settings, on_text=on_text, should_stop=stop)
            if deadline is not None and time.monotonic() > deadline:
                raise CancelledError("finished after the deadline")
        except EmbodiedRError as exc:
            timing.reasoning_s = time.monotonic() - start
            user_stop = should_stop is not None and should_stop()
            if (isinstance(exc, CancelledError) and not user_stop and deadline is not None
                    and time.monotonic() > deadline):
                exc = RequestTimeoutError(
                    "the reasoning model did not finish before the question's time limit; "
                    "raise timeout_s / qa.default_timeout_s or lower reasoning.max_new_tokens")
            return AnswerResult.failure(exc, episode_id=episode_id, timing=timing,
                                        messages=messages, keyframes_used=len(used))
        timing.reasoning_s = time.monotonic() - start
        result = self._result(raw, question_text, used, messages, episode_id, timing)
        if self.judge is not None and result.success and parse_choices(question_text):
            self._self_check(result, question_text, stop)
        return result

    def _self_check(self, result: AnswerResult, question_text: str,
                    stop: Callable[[], bool]) -> None:
        """Run the consistency judge on the reasoning; flag a disagreement."""
        start = time.monotonic()
        check = run_self_check(self.judge, question_text, result.reasoning, result.answer,  # type: ignore[arg-type]
                               prompts=self.prompts, should_stop=stop)
        result.timing.extra["self_check_s"] = time.monotonic() - start
        result.self_check, result.self_check_letter = check.outcome, check.letter
        if check.outcome == INCONSISTENT:
            result.message += (f" (self-check: the reasoning alone points to {check.letter}, "
                               f"not {result.answer}; treat this answer with care)")
        elif check.outcome == UNAVAILABLE:
            result.message += f" (self-check not possible: {check.detail})"

    def _result(self, raw: str, question_text: str, used: Sequence[FrameDescription],
                messages: list[ChatMessage], episode_id: str, timing: TimingInfo) -> AnswerResult:
        choices = dict(parse_choices(question_text))
        letters = "".join(choices) if choices else OPTION_LETTERS
        parsed = parse_reasoning_output(raw, valid_letters=letters)
        base = AnswerResult(success=False, raw_output=raw, reasoning=parsed.think,
                            keyframes_used=len(used), episode_id=episode_id, timing=timing,
                            messages=messages)
        if choices:
            if parsed.letter is None:
                return dataclasses.replace(
                    base, error_code=ErrorCode.UNPARSEABLE_ANSWER, answer=parsed.answer,
                    message="the reasoning model gave no option letter "
                            f"({', '.join(choices)}); raw_output holds its reply. With a "
                            "trained reasoning model this is rare; untrained/tiny models "
                            "produce it often")
            return dataclasses.replace(
                base, success=True, answer=parsed.letter,
                answer_text=choices.get(parsed.letter, ""),
                message="ok" if parsed.well_formed else
                "answered, but the reply was not in <think>/<answer> form")
        if not parsed.answer.strip():
            return dataclasses.replace(base, error_code=ErrorCode.UNPARSEABLE_ANSWER,
                                       message="the reasoning model gave an empty answer; "
                                               "raw_output holds its reply")
        return dataclasses.replace(base, success=True, answer=parsed.answer.strip(), message="ok")
