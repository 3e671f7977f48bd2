"""Prompts for the perception model (the frozen VLM), docs/method.md §3.

The first key frame is described alone (one image). Every later key frame is described as
a pair: image 1 is the previous key frame, image 2 the current one. Images follow the
prompt text in the request, as in the reference.

What the prompts ask for, and nothing more:

* first key frame: describe the scene, objects by colour and shape, where they are
  relative to the agent (picture the 3-D space around the agent first; agent-relative
  terms, not positions in the image); describe objects the question or its choices name,
  without answering; concise and clear;
* later key frames, three numbered parts that `perception_parser` splits again:
  (1) exactly one action from `ACTIONS`; (2) newly visible or changed spatial information
  relative to the agent, objects unclear before included, look-alike objects told apart by
  colour and shape, agent-relative terms after picturing the 3-D scene; (3) objects the
  question names, without answering or naming an option; concise and clear.

Two variants of each prompt exist. Question-aware (``on_query`` mode, the paper's): the
question and its choices are part of the prompt. Streaming (no question known yet): the
question parts are left out; the pair prompt's third part asks instead for the main
objects in view, so replies keep the three numbered parts the split rule needs.

The wording comes from a `PromptSet` (shipped default, or a user's prompt file).
"""

from __future__ import annotations

from embodied_r_ros.core.prompts.prompt_set import PromptSet, question_values

__all__ = ["ACTIONS", "ACTION_LIST_TEXT", "first_frame_prompt", "pair_prompt"]

# The ten camera motions the VLM may name for a pair of key frames (docs/method.md §3).
ACTIONS: tuple[str, ...] = (
    "move forward",
    "move backward",
    "move left",
    "move right",
    "move upward",
    "move downward",
    "rotate left",
    "rotate right",
    "tilt downward",
    "tilt upward",
)

# The value of the {actions} placeholder.
ACTION_LIST_TEXT = ", ".join(ACTIONS)


def _known(question: str | None) -> bool:
    return question is not None and bool(question.strip())


def first_frame_prompt(question: str | None = None, prompts: PromptSet | None = None) -> str:
    """Prompt for the first key frame (one image: the agent's starting view).

    ``question`` is the formatted question with its choices (`format_question`); with
    ``None`` or blank the streaming variant is returned.
    """
    prompts = prompts or PromptSet.default()
    if not _known(question):
        return prompts.render("perception.first_frame_streaming")
    return prompts.render("perception.first_frame", **question_values(question or ""))


def pair_prompt(question: str | None = None, prompts: PromptSet | None = None) -> str:
    """Prompt for a later key frame: image 1 = previous key frame, image 2 = current one."""
    prompts = prompts or PromptSet.default()
    if not _known(question):
        return prompts.render("perception.pair_streaming", actions=ACTION_LIST_TEXT)
    return prompts.render("perception.pair", actions=ACTION_LIST_TEXT, **question_values(question or ""))
