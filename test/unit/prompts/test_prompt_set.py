"""Prompt templates from a user's own file: the format, its errors, and every builder using it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.memory.episode import render_video_text
from embodied_r_ros.core.prompts.perception import ACTIONS, first_frame_prompt, pair_prompt
from embodied_r_ros.core.prompts.prompt_set import TEMPLATES, PromptSet, load_prompt_set
from embodied_r_ros.core.prompts.reasoning import (
    build_consistency_messages,
    build_reasoning_messages,
    format_question,
)
from embodied_r_ros.core.types import FrameDescription

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
QUESTION = format_question("Where is the red car?", ["on my left", "on my right"])

# A user's file in the shipped format: a few keys replaced, the rest left to the defaults.
USER_FILE = """\
perception:
  first_frame: |-
    FIRST VIEW. Objects asked about: '{question_body}'. {{not a placeholder}}
  pair: |-
    PAIR.
    1. One of: {actions}.
    2. New things.
    3. Objects of '{question_body}'.
reasoning:
  system: ""
  user: "VIDEO<\\n{video}\\n>\\n{question}"
  video_preamble: "PREAMBLE"
  frame_next: "F{index} after {action}: {observation}"
  unknown_action: "None"
  one_line_frames: false
consistency:
  user: "Q={question_body} R={reasoning} L={letters}"
"""


def _write(tmp_path: Path, text: str, name: str = "prompts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_empty_setting_gives_the_shipped_prompts(tmp_path) -> None:
    shipped = PromptSet.default()
    assert load_prompt_set("") is shipped and load_prompt_set(None) is shipped
    assert load_prompt_set(_write(tmp_path, "")) == shipped
    assert first_frame_prompt(QUESTION) == first_frame_prompt(QUESTION, shipped)
    assert shipped.overridden == () and shipped.source == "shipped"


def test_every_builder_uses_the_loaded_file(tmp_path) -> None:
    prompts = load_prompt_set(_write(tmp_path, USER_FILE))
    assert set(prompts.overridden) == {
        "perception.first_frame", "perception.pair", "reasoning.system", "reasoning.user",
        "reasoning.video_preamble", "reasoning.frame_next", "reasoning.unknown_action",
        "reasoning.one_line_frames", "consistency.user",
    }
    body = "Where is the red car?\nChoices:\nA. on my left\nB. on my right"
    assert first_frame_prompt(QUESTION, prompts) == (
        f"FIRST VIEW. Objects asked about: '{body}'. {{not a placeholder}}"
    )
    assert pair_prompt(QUESTION, prompts) == (
        "PAIR.\n1. One of: " + ", ".join(ACTIONS) + f".\n2. New things.\n3. Objects of '{body}'."
    )
    # Keys the file leaves out keep the shipped wording.
    assert pair_prompt(None, prompts) == pair_prompt(None)
    assert first_frame_prompt(None, prompts) == first_frame_prompt(None)

    frames = [FrameDescription(0, "a room\nwith a door"), FrameDescription(4, "a hall\n  wide", None),
              FrameDescription(6, "stairs", "move upward")]
    video = render_video_text(frames, prompts)
    assert video == (
        "PREAMBLE\nFrame 0: Observe: a room\nwith a door\nF1 after None: a hall\n  wide\n"
        "F2 after move upward: stairs"
    )
    messages = build_reasoning_messages(video, QUESTION, prompts)
    assert messages == [{"role": "user", "content": f"VIDEO<\n{video}\n>\n{QUESTION}"}]
    judge = build_consistency_messages(QUESTION, " it is on the left ", prompts)
    assert judge[0] == {"role": "system", "content": PromptSet.default().text("consistency.system")}
    assert judge[1]["content"] == f"Q={body} R=it is on the left L=A, B"


def test_shipped_prompts_written_by_the_command_load_back_unchanged(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    written = subprocess.run([sys.executable, "-m", "embodied_r_ros.core.prompts.prompt_set"],
                             capture_output=True, text=True, env=env, check=True).stdout
    path = _write(tmp_path, written)
    assert load_prompt_set(path) == PromptSet.default()
    for key in TEMPLATES:
        assert key.split(".", 1)[1] + ":" in written
    check = subprocess.run([sys.executable, "-m", "embodied_r_ros.core.prompts.prompt_set", "--check", str(path)],
                           capture_output=True, text=True, env=env)
    assert check.returncode == 0 and "ok" in check.stdout
    bad = _write(tmp_path, "reasoning:\n  user: '{question}'\n", "bad.yaml")
    check = subprocess.run([sys.executable, "-m", "embodied_r_ros.core.prompts.prompt_set", "--check", str(bad)],
                           capture_output=True, text=True, env=env)
    assert check.returncode == 1 and "{video}" in check.stderr and "reasoning.user" in check.stderr


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        # missing required placeholder
        ("perception:\n  pair: 'no question here'\n",
         ["'perception.pair'", "missing required placeholder {question} or {question_body}"]),
        ("reasoning:\n  user: '{question}'\n", ["'reasoning.user'", "missing required placeholder {video}"]),
        ("consistency:\n  user: '{question} only'\n", ["'consistency.user'", "{reasoning}"]),
        ("reasoning:\n  frame_next: 'Frame {index}: {observation}'\n", ["'reasoning.frame_next'", "{action}"]),
        # unknown keys
        ("perception:\n  pairs: 'x {question}'\n", ["unknown key 'perception.pairs'", "pair_streaming"]),
        ("vlm:\n  pair: x\n", ["unknown key 'vlm'", "perception, reasoning, consistency"]),
        # unknown placeholder
        ("perception:\n  first_frame: '{question} {choices}'\n",
         ["'perception.first_frame'", "unknown placeholder {choices}", "{question_body}"]),
        ("perception:\n  first_frame_streaming: 'Describe {question}'\n",
         ["'perception.first_frame_streaming'", "unknown placeholder {question}", "allows: none"]),
        # malformed templates and values
        ("perception:\n  first_frame: '{question'\n", ["'perception.first_frame'", "braces do not pair up"]),
        ("perception:\n  first_frame: '{question!r}'\n", ["format spec or conversion"]),
        ("perception:\n  first_frame: 42\n", ["'perception.first_frame'", "must be text"]),
        ("perception:\n  first_frame: '  '\n", ["'perception.first_frame'", "is empty"]),
        ("reasoning:\n  one_line_frames: 'yes'\n", ["'reasoning.one_line_frames'", "true or false"]),
        ("perception: [1, 2]\n", ["'perception' must be a mapping"]),
        ("- a\n- b\n", ["top level must be a mapping"]),
        # not YAML
        ("perception:\n  pair: 'x\n  other: [\n", ["is not valid YAML"]),
    ],
)
def test_bad_prompt_files_are_config_errors_naming_file_and_key(tmp_path, text, fragments) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_prompt_set(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_unreadable_prompt_files_are_config_errors(tmp_path) -> None:
    for path in (tmp_path / "missing.yaml", tmp_path):
        with pytest.raises(ConfigError, match="cannot be read") as info:
            load_prompt_set(path)
        assert str(path) in str(info.value)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_prompt_set(binary)


def test_empty_texts_allowed_where_they_mean_leave_out(tmp_path) -> None:
    prompts = load_prompt_set(_write(tmp_path, "reasoning:\n  video_preamble: ''\n  system: ''\n"))
    video = render_video_text([FrameDescription(0, "a door")], prompts)
    assert video == "Frame 0: Observe: a door"
    assert [m["role"] for m in build_reasoning_messages(video, QUESTION, prompts)] == ["user"]
