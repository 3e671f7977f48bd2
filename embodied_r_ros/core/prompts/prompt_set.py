"""Prompt templates: the shipped wording, or a user's own file, validated on load.

Every text the package sends to a model is built from one `PromptSet`: the perception
prompts (first key frame and pair, question-aware and streaming), the reasoning system
prompt, the user message around the video text, the video text itself (preamble and frame
lines), and the consistency judge's prompt. The robot pipeline (ROS parameter
`prompts.file`) and the training package (`prompts_file` in a training config) load the
same file with `load_prompt_set`, so both build identical prompts.

API::

    prompts = load_prompt_set("my_prompts.yaml")   # or PromptSet.default()
    first_frame_prompt(question, prompts)           # perception_prompts
    pair_prompt(question, prompts)
    render_video_text(descriptions, prompts)        # memory
    build_reasoning_messages(video, question, prompts)      # reasoning_prompts
    build_consistency_messages(question, think, prompts)

Each of those functions takes ``prompts=None`` for the shipped wording.

File format (YAML; every key optional, a key left out keeps the shipped text)::

    perception:
      first_frame: |          # {question} or {question_body} required
        ...
      pair: ...               # {question} or {question_body} required; {actions} optional
      first_frame_streaming: ...
      pair_streaming: ...     # {actions} optional
    reasoning:
      system: ...             # may be empty: then no system message is sent
      user: ...               # {video} and ({question} or {question_body}) required
      video_preamble: ...     # may be empty: then the video text starts at frame 0
      frame_first: "Frame {index}: Observe: {observation}"
      frame_next: "Frame {index}: After {action}, Observe: {observation}"
      unknown_action: ...     # written as {action} when a frame's action is unknown
      empty_observation: ...  # written as {observation} when a frame has no text
      no_frames: ...          # the line written when there are no frames at all
      one_line_frames: true   # collapse line breaks inside a frame's text
    consistency:
      system: ...             # may be empty
      user: ...               # {reasoning} and ({question} or {question_body}) required

Placeholders are written ``{name}``; a literal brace is written ``{{`` or ``}}``. They
take no format spec or conversion. `PLACEHOLDERS` describes each one and `TEMPLATES`
says which template allows and requires which. Loading fails with a `ConfigError` naming
the file and the key for: an unreadable file, invalid YAML, an unknown key, a value of
the wrong type, an empty text where one is needed, a missing required placeholder, an
unknown placeholder, and unbalanced braces.

`python -m embodied_r_ros.core.prompts.prompt_set > my_prompts.yaml` writes the shipped prompts
in this format (a starting point for your own file); `--check FILE` validates a file.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.prompts.wording import SHIPPED_TEMPLATES

__all__ = [
    "PLACEHOLDERS",
    "TEMPLATES",
    "PromptSet",
    "TemplateSpec",
    "load_prompt_set",
    "question_values",
]

PLACEHOLDERS: dict[str, str] = {
    "question": "the question with its choices, as format_question writes it "
    "('Question: <text>\\nChoices:\\nA. <option>\\n...')",
    "question_body": "the same text without its leading 'Question:' label (the form the "
    "reference puts into its perception prompts)",
    "actions": "the ten actions a pair prompt offers, comma-separated "
    "('move forward, move backward, ...')",
    "video": "the video text: the preamble, then one line per key frame",
    "index": "the key frame's number in the video text (0, 1, 2, ...)",
    "action": "the action that led to this key frame (or reasoning.unknown_action)",
    "observation": "what the key frame shows (or reasoning.empty_observation)",
    "reasoning": "the text inside <think>...</think> of the answer being judged",
    "letters": "the option letters of the question, e.g. 'A, B, C' "
    "(or 'the option letters' when it has none)",
}

_QUESTION = ("question", "question_body")


@dataclass(frozen=True)
class TemplateSpec:
    """What one key of a prompt file may hold.

    required: groups of placeholders; the template must use at least one of each group.
    optional: further placeholders it may use. flag: the value is true/false, not text.
    may_be_empty: an empty text is allowed (and means "leave this part out").
    """

    key: str
    description: str
    required: tuple[tuple[str, ...], ...] = ()
    optional: tuple[str, ...] = ()
    may_be_empty: bool = False
    flag: bool = False

    @property
    def allowed(self) -> tuple[str, ...]:
        names = [name for group in self.required for name in group] + list(self.optional)
        return tuple(dict.fromkeys(names))


TEMPLATES: dict[str, TemplateSpec] = {
    spec.key: spec
    for spec in (
        TemplateSpec("perception.first_frame",
                     "First key frame, question known (on_query mode): one image.",
                     required=(_QUESTION,)),
        TemplateSpec("perception.pair",
                     "Later key frame, question known: image 1 = previous key frame, image "
                     "2 = this one; asks for the three numbered parts the parser splits.",
                     required=(_QUESTION,), optional=("actions",)),
        TemplateSpec("perception.first_frame_streaming",
                     "First key frame in streaming mode (no question known yet)."),
        TemplateSpec("perception.pair_streaming",
                     "Later key frame in streaming mode; must still ask for three numbered "
                     "parts, or the parser keeps the whole reply as the observation.",
                     optional=("actions",)),
        TemplateSpec("reasoning.system", "System prompt of the reasoning LM.",
                     may_be_empty=True),
        TemplateSpec("reasoning.user",
                     "The reasoning LM's user message: agent framing, video text, question.",
                     required=(("video",), _QUESTION)),
        TemplateSpec("reasoning.video_preamble", "First line(s) of the video text.",
                     may_be_empty=True),
        TemplateSpec("reasoning.frame_first", "The video-text line of frame 0.",
                     required=(("observation",),), optional=("index",)),
        TemplateSpec("reasoning.frame_next", "The video-text line of every later frame.",
                     required=(("action",), ("observation",)), optional=("index",)),
        TemplateSpec("reasoning.unknown_action",
                     "Written as {action} when a frame's action is unknown."),
        TemplateSpec("reasoning.empty_observation",
                     "Written as {observation} when a frame has no description."),
        TemplateSpec("reasoning.no_frames", "The video text's only line when there are no frames."),
        TemplateSpec("reasoning.one_line_frames",
                     "true: line breaks and runs of spaces inside a frame's action and "
                     "observation become one space, so every frame is one line; false: "
                     "the perception text is kept as written.", flag=True),
        TemplateSpec("consistency.system", "System prompt of the consistency judge.",
                     may_be_empty=True),
        TemplateSpec("consistency.user",
                     "The judge's user message: question and the reasoning only.",
                     required=(("reasoning",), _QUESTION), optional=("letters",)),
    )
}

_SECTIONS = tuple(dict.fromkeys(key.split(".", 1)[0] for key in TEMPLATES))
_LEADING_LABEL = re.compile(r"^\s*question\s*:\s*", re.IGNORECASE)


def question_values(question_text: str) -> dict[str, str]:
    """{question} and {question_body} for a formatted question text."""
    text = (question_text or "").strip()
    return {"question": text, "question_body": _LEADING_LABEL.sub("", text, count=1).strip()}


def _placeholders(where: str, template: str) -> list[str]:
    """Placeholder names of `template` in order; ConfigError on malformed braces."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(
            f"{where}: braces do not pair up ({exc}); write {{{{ and }}}} for a literal brace"
        ) from exc
    names = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if spec or conversion:
            raise ConfigError(
                f"{where}: placeholder {{{field}}} has a format spec or conversion; "
                "placeholders take none (write just {name})"
            )
        names.append(field)
    return names


def _check_template(where: str, spec: TemplateSpec, value: Any) -> str | bool:
    if spec.flag:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be text, got {type(value).__name__} {value!r}")
    if not value.strip() and not spec.may_be_empty:
        raise ConfigError(f"{where}: is empty; give the text, or leave the key out to keep the shipped one")
    used = _placeholders(where, value)
    allowed = spec.allowed
    for name in used:
        if name not in allowed:
            shown = ", ".join(f"{{{n}}}" for n in allowed) or "none"
            raise ConfigError(
                f"{where}: unknown placeholder {{{name}}}; this template allows: {shown} "
                "(write {{ and }} for literal braces)"
            )
    for group in spec.required:
        if not any(name in used for name in group):
            need = " or ".join(f"{{{n}}}" for n in group)
            raise ConfigError(f"{where}: missing required placeholder {need}")
    return value


class PromptSet:
    """One complete, validated set of prompt templates (immutable).

    `source` is "shipped" or the path of the file it was loaded from; `overridden` lists
    the keys that file set.
    """

    __slots__ = ("_templates", "source", "overridden")

    def __init__(self, overrides: Mapping[str, str | bool] | None = None, *, source: str = "shipped") -> None:
        templates: dict[str, str | bool] = dict(SHIPPED_TEMPLATES)
        for key, value in (overrides or {}).items():
            spec = TEMPLATES.get(key)
            if spec is None:
                raise ConfigError(f"{source}: unknown key {key!r}; known keys: {', '.join(TEMPLATES)}")
            templates[key] = _check_template(f"{source}: key {key!r}", spec, value)
        self._templates = templates
        self.source = source
        self.overridden = tuple(k for k in TEMPLATES if k in (overrides or {}))

    @classmethod
    def default(cls) -> PromptSet:
        """The shipped wording (one shared instance)."""
        return _default_set()

    def text(self, key: str) -> str:
        """The raw template of `key` (placeholders unfilled)."""
        value = self._get(key)
        if isinstance(value, bool):
            raise ConfigError(f"prompt key {key!r} is a flag, not a text")
        return value

    def flag(self, key: str) -> bool:
        """The value of a true/false key (e.g. reasoning.one_line_frames)."""
        value = self._get(key)
        if not isinstance(value, bool):
            raise ConfigError(f"prompt key {key!r} is a text, not a flag")
        return value

    def render(self, key: str, **values: Any) -> str:
        """The template of `key` with its placeholders filled from `values`.

        Every placeholder the template uses must be given (a programming error
        otherwise); values for placeholders it does not use are ignored.
        """
        template = self.text(key)
        allowed = TEMPLATES[key].allowed
        return template.format_map({name: values[name] for name in allowed if name in values})

    def _get(self, key: str) -> str | bool:
        if key not in self._templates:
            raise ConfigError(f"unknown prompt key {key!r}; known keys: {', '.join(TEMPLATES)}")
        return self._templates[key]

    def as_dict(self) -> dict[str, str | bool]:
        """Every key with its value (dotted keys)."""
        return dict(self._templates)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PromptSet) and other._templates == self._templates

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, str(v)) for k, v in self._templates.items())))

    def __repr__(self) -> str:
        return f"PromptSet(source={self.source!r}, overridden={list(self.overridden)})"

    def to_yaml(self) -> str:
        """This set as a prompt file (comments describe every key and placeholder)."""
        lines = [
            "# Prompt templates of embodied_r_ros (load with prompts.file / prompts_file).",
            "# Every key is optional: a key left out keeps the shipped wording.",
            "# Placeholders are written {name}; write {{ and }} for literal braces.",
            "# Placeholders:",
        ]
        lines += [f"#   {{{name}}}: {text}" for name, text in PLACEHOLDERS.items()]
        for section in _SECTIONS:
            lines.append(f"{section}:")
            for key, spec in TEMPLATES.items():
                if not key.startswith(section + "."):
                    continue
                lines.append(f"  # {spec.description}")
                rules = [" or ".join(f"{{{n}}}" for n in g) + " required" for g in spec.required]
                rules += [f"{{{n}}} optional" for n in spec.optional if not any(n in g for g in spec.required)]
                if rules:
                    lines.append("  # " + "; ".join(rules) + ".")
                dumped = yaml.dump({key.split(".", 1)[1]: self._templates[key]}, Dumper=_BlockDumper,
                                   allow_unicode=True, sort_keys=False, width=100)
                lines += [("  " + line) if line.strip() else "" for line in dumped.rstrip("\n").splitlines()]
        return "\n".join(lines) + "\n"


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as literal blocks (readable prompt files)."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockDumper.add_representer(str, _represent_str)


@lru_cache(maxsize=1)
def _default_set() -> PromptSet:
    return PromptSet()


def load_prompt_set(path: str | Path | None) -> PromptSet:
    """The prompt set of a YAML prompt file; None or "" gives `PromptSet.default()`.

    Raises ConfigError naming the file (and the key) when the file cannot be read, is
    not valid YAML, or breaks a rule of the format (see the module docstring).
    """
    if path is None or str(path).strip() == "":
        return PromptSet.default()
    path = Path(path).expanduser()
    where = f"prompt file {path}"
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where} cannot be read: {exc}. Check prompts.file / prompts_file.") from exc
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ConfigError(
            f"{where}: the top level must be a mapping with sections {', '.join(_SECTIONS)}"
        )
    overrides: dict[str, Any] = {}
    for section, body in doc.items():
        if section not in _SECTIONS:
            raise ConfigError(
                f"{where}: unknown key {section!r}; the sections are {', '.join(_SECTIONS)}"
            )
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: key {section!r} must be a mapping of template names")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in TEMPLATES:
                known = ", ".join(k.split(".", 1)[1] for k in TEMPLATES if k.startswith(section + "."))
                raise ConfigError(f"{where}: unknown key {key!r}; {section} has: {known}")
            overrides[key] = value
    return PromptSet(overrides, source=where)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the shipped prompts as a prompt file, or check a prompt file."""
    parser = argparse.ArgumentParser(
        prog="python -m embodied_r_ros.core.prompts.prompt_set",
        description="Print the shipped prompt templates as a prompt file, or check one.",
    )
    parser.add_argument("--check", metavar="FILE", help="validate FILE and list the keys it sets")
    args = parser.parse_args(argv)
    if args.check:
        try:
            prompts = load_prompt_set(args.check)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        keys = ", ".join(prompts.overridden) or "none (all shipped)"
        print(f"{args.check}: ok; sets {keys}")
        return 0
    sys.stdout.write(PromptSet.default().to_yaml())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
