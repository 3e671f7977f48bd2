"""The mini world's consistency judge: it finds the letter the reasoning's decision names.

The paper's consistency reward asks a frozen reference model which option a reasoning
supports (docs/method.md §5). Worked reasonings here end with an option scan ("A. right:
no; B. left: yes.", `worked.option_scan`), and a judge that learned only to copy the
letter before the "yes" cannot see the shortcut GRPO finds with groups of 8: a scan that
marks the decision's words on a letter whose option says something else ("So now it is
to my left. A. left: yes." where option A is "right"). That judge pays the consistency
reward for it, so the reward checks nothing the accuracy reward does not.

This judge is trained to ignore whatever scan the reasoning carries and write its own from
the question's options and the decision (the reasoning's last sentence), then its letter:
``<think>A. right: no; B. left: yes.</think><answer>B</answer>``. Its training pairs show
the same reasoning with its true scan, with no scan, with a scan that marks another option,
and with two forged scans (the decision's words on another letter after the options before
it, or over the options' words in another order, as GRPO's completions were seen to write
on the model-selection rooms); the target is always
the scan of the option the decision names (`worked.named_option`). The reward reads the
letter in the ``<answer>`` block (`core.qa.consistency.read_judge_letter`), and the judge
gets `JUDGE_TOKENS` new tokens instead of the paper's 10, room for a four-option scan.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.prompts.reasoning import build_consistency_messages, parse_choices
from embodied_r_ros.sample_data.questions import LETTERS
from embodied_r_training.mini_world import worked

# New tokens the judge may write: its longest reply, a scan to the fourth option of a
# progress-evaluation or appearance-order question, is 76 tokens with the end token.
JUDGE_TOKENS = 80

# How the reasoning a training pair shows ends (drawn uniformly).
SCAN_VARIANTS = ("true", "none", "other", "shortcut", "shuffled")


def shortcut_scan(choices: Sequence[str], named: int, at: int) -> str:
    """A scan that writes option `named`'s words at letter `at` (`at` != `named`): the
    options before `at` as written with "no", then the decision's words with "yes"."""
    return worked.scan_text([*((i, c, False) for i, c in enumerate(choices[:at])), (at, choices[named], True)])


def shuffled_scan(choices: Sequence[str], named: int, rng: random.Random) -> str:
    """A scan over the options' words in another order (the decision's words on another
    letter), up to the decision's words: the forged scans GRPO's completions write."""
    if len(choices) < 2:
        raise ValueError("a shuffled scan needs at least two options")
    order = list(range(len(choices)))
    while order.index(named) == named:
        rng.shuffle(order)
    return worked.scan_text((pos, choices[i], i == named) for pos, i in enumerate(order[: order.index(named) + 1]))


def judge_reply(choices: Sequence[str], named: int) -> str:
    """What the judge writes for a decision naming option `named`."""
    return f"<think>{worked.option_scan(choices, named)}</think><answer>{LETTERS[named]}</answer>"


def judge_pair(question: str, think: str, answer_index: int, variant: str,
               rng: random.Random) -> tuple[list[dict[str, str]], str] | None:
    """One training pair for a reasoning (with or without its scan) of `question`; the
    option the decision names is `worked.named_option`, else `answer_index` (the reasoning
    was written to reach the answer). None when the question has fewer than two options."""
    choices = [text for _, text in parse_choices(question)]
    if len(choices) < 2:
        return None
    body = worked.strip_scan(think)
    named = worked.named_option(body, choices)
    named = answer_index if named is None else named
    others = [i for i in range(len(choices)) if i != named]
    if variant == "true":
        shown = f"{body} {worked.option_scan(choices, named)}"
    elif variant == "none":
        shown = body
    elif variant == "other":
        shown = f"{body} {worked.option_scan(choices, rng.choice(others))}"
    elif variant == "shortcut":
        shown = f"{body} {shortcut_scan(choices, named, rng.choice(others))}"
    elif variant == "shuffled":
        shown = f"{body} {shuffled_scan(choices, named, rng)}"
    else:
        raise ValueError(f"unknown scan variant {variant!r}; one of {', '.join(SCAN_VARIANTS)}")
    return build_consistency_messages(question, shown), judge_reply(choices, named)


def judge_pairs(items: Iterable[tuple[str, str, str]], seed: int) -> list[tuple[list[dict[str, str]], str]]:
    """Training pairs for (question, reasoning, answer letter) items, each with a scan
    variant drawn uniformly from `SCAN_VARIANTS`."""
    rng = random.Random(seed)
    pairs = []
    for question, think, letter in items:
        index = LETTERS.index(letter) if letter in LETTERS else 0
        pair = judge_pair(question, think, index, rng.choice(SCAN_VARIANTS), rng)
        if pair is not None:
            pairs.append(pair)
    return pairs


JUDGE_STEPS = 1400  # about what the shipped run's 5-minute budget allowed (2,385 steps took 8.4 min)


def train_judge(model_dir: Path, items: Sequence[tuple[str, str, str]], *, steps: int = JUDGE_STEPS,
                minutes: float = 0.0, seed: int = 0, text_episodes: int = 6000, lr: float = 5e-4,
                threads: int = 1, progress: bool = True) -> dict[str, Any]:
    """Train the judge in `model_dir` (a copy of the warm-up model), in place, on `items`
    (question, reasoning, answer letter: the warm-up's worked examples) and on
    `text_episodes` reading-curriculum questions, for `steps` steps (at most 3 epochs);
    `minutes` caps its time (0: no cap)."""
    import torch

    from embodied_r_training.mini_world import curriculum, lm_sft

    torch.set_num_threads(threads)
    records = curriculum.make_records(seed * 1000 + 11, text_episodes, curriculum.LONG_FRAMES)
    pairs = judge_pairs([*items, *((r["question"], r["think"], r["answer"]) for r in records)], seed)
    res = lm_sft.train_lm(model_dir, pairs, epochs=3, lr=lr, seed=seed, progress=progress, max_steps=steps,
                          max_minutes=minutes or None, desc="consistency judge")
    return {k: v for k, v in res.items() if k != "history"}
