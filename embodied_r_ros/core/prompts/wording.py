"""The shipped wording of every prompt template (the defaults of `prompt_set.PromptSet`).

What each template must carry is set out in docs/method.md §3 (perception) and §4
(reasoning); the wording is this project's own. Placeholders in braces are filled in by
`PromptSet.render`; `prompt_set.TEMPLATES` lists which ones each template may use. A user
can replace any of these texts with a prompt file (`prompt_set.load_prompt_set`).
"""

from __future__ import annotations

__all__ = ["SHIPPED_TEMPLATES"]

# -- perception (VLM) ------------------------------------------------------------------

_SEE = "You are looking through the eyes of an agent. "
_WHERE = (
    "Say where things are relative to the agent itself: before you describe anything, "
    "picture the three-dimensional space around the agent, then give positions in the "
    "agent's own terms (to its left, ahead-left, below it, ...) rather than as places in "
    "the picture."
)
_LOOK_ALIKE = (
    "Many objects of one kind can look alike (the buildings of a city, for example), so "
    "tell them apart by their colour and shape."
)
_DO_NOT_ANSWER = (
    "Do not answer the question and do not give or name any option; only observe."
)
_ACTION_PART = (
    "1. The action. From how the objects in view shifted between the two images, decide "
    "which action the agent took. Write exactly one of these and nothing else: {actions}."
)
_NEW_PART = (
    "2. New spatial information. Compare image 2 with image 1 and describe what it newly "
    "shows, including objects that were hidden or unclear before. "
    + _LOOK_ALIKE
    + " Focus on how the agent is placed among its surroundings. "
    + _WHERE
)
_PAIR_HEAD = (
    _SEE
    + "Image 1 is its first-person view before one action and image 2 its view after "
    "that action. Reply in three numbered parts:\n"
)
_CLOSE = "Keep your reply concise and clear."

FIRST_FRAME = (
    _SEE
    + "The image is its first-person view. Describe the scene it sees.\n"
    "Characterise objects by their colour and shape. "
    + _WHERE
    + "\nMost important: if objects named in the question below (in the question itself "
    "or in its choices) appear in the image, describe each of them. "
    + _DO_NOT_ANSWER
    + "\n\n{question}\n\n"
    + _CLOSE
)

FIRST_FRAME_STREAMING = (
    _SEE
    + "The image is its first-person view. Describe the scene it sees.\n"
    "Characterise objects by their colour and shape. "
    + _WHERE
    + "\n"
    + _CLOSE
)

PAIR = (
    _PAIR_HEAD
    + _ACTION_PART
    + "\n"
    + _NEW_PART
    + "\n3. Objects of the question. If objects named in the question below (or in its "
    "choices) appear in the images, describe them. "
    + _DO_NOT_ANSWER
    + "\n\n{question}\n\n"
    + _CLOSE
)

PAIR_STREAMING = (
    _PAIR_HEAD
    + _ACTION_PART
    + "\n"
    + _NEW_PART
    + "\n3. Objects in view. Describe the main objects now in view by their colour and "
    "shape, with their positions relative to the agent.\n"
    + _CLOSE
)

# -- reasoning (LM) --------------------------------------------------------------------

REASONING_SYSTEM = (
    "Think the question through before you answer. Put your reasoning between <think> "
    "and </think>, then your final answer between <answer> and </answer>. The answer must "
    "be the conclusion your reasoning reaches and follow directly from it."
)

REASONING_USER = (
    "Imagine you are the agent. The video is what you have seen with your own eyes, from "
    "the past up to the present moment.\n"
    "The video:\n{video}\n\n{question}"
)

VIDEO_PREAMBLE = (
    "The video is described in text, one key frame per line, in time order. Frame 0 is "
    "the starting view, where the agent began; as the agent moves it sees new views, and "
    "the last frame is the view at its current position."
)

FRAME_FIRST = "Frame {index}: Observe: {observation}"
FRAME_NEXT = "Frame {index}: After {action}, Observe: {observation}"
UNKNOWN_ACTION = "an unknown movement"
EMPTY_OBSERVATION = "(no description)"
NO_FRAMES = "(no frames were recorded)"

# -- consistency judge (frozen reference model) ------------------------------------------

CONSISTENCY_SYSTEM = (
    "You are given a multiple-choice question and a piece of reasoning written by someone "
    "else. Decide which option the reasoning supports. Reply with the option letter only."
)

CONSISTENCY_USER = (
    "{question}\n\nReasoning:\n{reasoning}\n\n"
    "Using only this reasoning, which option is correct? "
    "Reply with a single letter ({letters}) and nothing else."
)

SHIPPED_TEMPLATES: dict[str, str | bool] = {
    "perception.first_frame": FIRST_FRAME,
    "perception.pair": PAIR,
    "perception.first_frame_streaming": FIRST_FRAME_STREAMING,
    "perception.pair_streaming": PAIR_STREAMING,
    "reasoning.system": REASONING_SYSTEM,
    "reasoning.user": REASONING_USER,
    "reasoning.video_preamble": VIDEO_PREAMBLE,
    "reasoning.frame_first": FRAME_FIRST,
    "reasoning.frame_next": FRAME_NEXT,
    "reasoning.unknown_action": UNKNOWN_ACTION,
    "reasoning.empty_observation": EMPTY_OBSERVATION,
    "reasoning.no_frames": NO_FRAMES,
    "reasoning.one_line_frames": True,
    "consistency.system": CONSISTENCY_SYSTEM,
    "consistency.user": CONSISTENCY_USER,
}
