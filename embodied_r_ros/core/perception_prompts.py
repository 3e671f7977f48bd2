"""Prompts for the perception model (the frozen VLM).

Two variants of each prompt exist:

* question-aware (``on_query`` mode, the paper's behaviour): the VLM is told the question
  and its choices and is asked to describe every object they mention, without answering;
* question-free (``streaming`` mode): no question is known yet, so the VLM describes the
  scene and its changes in general terms, covering all salient objects.

The first key frame is described alone (one image). Every later key frame is described as
a pair: image 1 is the previous key frame, image 2 is the current one. The pair prompt
asks for three numbered parts that ``perception_parser`` splits again:
(1) the single action taken, from ``ACTIONS``; (2) new or changed spatial information;
(3) question-related objects (or, in streaming mode, notable objects).
"""

from __future__ import annotations

# The ten camera motions the VLM may name for a pair of key frames (FACTS §3 order).
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

_ACTION_LIST = ", ".join(ACTIONS)

_SPATIAL_HINT = (
    "For each object give its colour and shape and where it lies relative to you "
    "(for example left, right, ahead, ahead-left, behind, above, below) and roughly how far."
)


def _question_block(question: str) -> str:
    return (
        "The question you must NOT answer (use it only to know what to look at):\n"
        f"{question.strip()}\n"
    )


def first_frame_prompt(question: str | None = None) -> str:
    """Prompt for the first key frame (one image: the agent's starting view).

    With ``question`` the VLM must describe the objects named in the question or its
    choices without answering it; with ``None`` it describes the scene in general.
    """
    head = (
        "You are the eyes of an agent exploring a scene. The image is the agent's own "
        "first-person view at the start of its trip.\n"
    )
    if question is None or not question.strip():
        return (
            head
            + "Describe the scene: the kind of place, the layout, and every salient "
            "object you can see. "
            + _SPATIAL_HINT
            + "\nBe factual and concise; describe only what is visible."
        )
    return (
        head
        + _question_block(question)
        + "Describe the scene and its layout. "
        + _SPATIAL_HINT
        + " Make sure to describe every object that the question or its choices mention "
        "if it is visible, and say so if it is not. Do not answer the question and do "
        "not guess an option."
    )


def pair_prompt(question: str | None = None) -> str:
    """Prompt for a later key frame: image 1 = previous key frame, image 2 = current one.

    The reply must have three numbered parts: (1) exactly one action from ``ACTIONS``,
    (2) newly visible or changed spatial information relative to the agent, (3) the
    objects the question mentions (question-aware) or notable objects (streaming).
    """
    head = (
        "You are the eyes of an agent moving through a scene. You get two images from "
        "the agent's own camera: image 1 is the earlier view and image 2 is the current "
        "view, taken after the agent moved.\n"
    )
    part1 = (
        "1. Action: which single movement took the agent from image 1 to image 2? "
        f"Answer with exactly one of: {_ACTION_LIST}.\n"
    )
    part2 = (
        "2. Changes: what became visible, disappeared or changed position relative to "
        "the agent between the two images. " + _SPATIAL_HINT + "\n"
    )
    if question is None or not question.strip():
        part3 = (
            "3. Objects: describe the notable objects in image 2 (colour, shape, "
            "position relative to the agent), including landmarks useful for finding "
            "the way back.\n"
        )
        return (
            head
            + "Reply in three numbered parts:\n"
            + part1
            + part2
            + part3
            + "Be factual and concise; describe only what is visible."
        )
    part3 = (
        "3. Question objects: describe the objects that the question or its choices "
        "mention as they appear in image 2 (colour, shape, position relative to the "
        "agent), or say that they are not visible. Do not answer the question.\n"
    )
    return (
        head
        + _question_block(question)
        + "Reply in three numbered parts:\n"
        + part1
        + part2
        + part3
        + "Describe only what is visible and do not pick an option."
    )
