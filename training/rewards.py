"""The GRPO rewards (docs/method.md §5), usable directly as TRL reward functions.

Every reward has TRL's signature ``reward(completions, **kwargs) -> list[float]``.
``completions`` holds plain strings or chat-message lists
(``[{"role": "assistant", "content": "..."}]``; the last assistant message counts, and a
content given as a list of ``{"type": "text", "text": ...}`` parts is joined).
Dataset columns arrive as keyword lists: ``solution`` (ground truth per completion) and
``question`` (question text with its choices per completion).

* ``format_reward``: 1.0 iff `answer_parser.is_well_formed` (exactly one
  <think>..</think> followed by exactly one <answer>..</answer>, whitespace only around
  and between; empty blocks allowed).
* ``accuracy_reward``: 1.0 iff the answer's option letter equals the solution's letter.
  The letter of the completion comes from its <answer> block only
  (`answer_parser.extract_letter`). The ground truth is read the same way as that block:
  "B", "b", "B.", "(B)", "B. right", "Answer: B" and "<answer>B</answer>" all mean B.
  Valid completion letters are those the question lists (A-H when no question is given),
  so a letter that is not an option never scores. When the solution names no letter
  (free-text question) the whole answer text is compared, ignoring case, surrounding
  punctuation and repeated spaces.
* ``ConsistencyReward``: for correct letter answers only, a frozen reference model sees
  the question, its choices and the <think> text and replies with one letter; 1.0 iff it
  picks the same letter. Every 0.0 it gives has a reason, logged on the
  ``embodied_r_ros.rewards`` logger and counted in ``stats.fallbacks``:
  ``wrong_answer`` and ``reference_disagrees`` (DEBUG: normal training signal),
  ``no_think``, ``free_text`` (no choices to ask about), ``unparseable_reply`` (INFO),
  ``model_error`` and ``timeout`` (WARNING).

Where these rules deliberately differ from the reference code (docs/method.md §5), and
the reference-compatible variants offered beside them:

* Letter of the completion. The reference's accuracy reward searches the WHOLE
  completion, reasoning included, in this order: the last ``$\\boxed{X}$``; the first
  "answer X"; the last letter followed by a full stop; the last stand-alone letter (both
  cases, A-H); else the upper-cased text itself. So a completion whose reasoning ends
  with "... so not B." while its answer block says "A" can score as B. Here only the
  answer block counts. `reference_accuracy_reward` (letter rule ``"reference"``) applies
  the reference's search to the completion and to the solution alike.
* Format. The reference accepts ``<think>`` only at the very start and nothing at all
  (not even a newline) after ``</answer>``, but lets its lazy pattern swallow repeated or
  nested tags ("<think>a</think><think>b</think><answer>C</answer>" passes). Here
  whitespace around the blocks is allowed and every tag must occur exactly once.
  `reference_format_reward` (format rule ``"reference"``) is the reference's check.
* `ConsistencyReward` decides "correct" with this module's letter rule in both cases.

`accuracy_reward_for` / `format_reward_for` return the function for a rule name
(``"project"`` or ``"reference"``); the training config chooses with
``rewards.rules``.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from embodied_r_ros.core.backends.base import Reasoner
from embodied_r_ros.core.errors import (
    CancelledError,
    ConfigError,
    InvalidRequestError,
    RequestTimeoutError,
)
from embodied_r_ros.core.prompts.prompt_set import PromptSet
from embodied_r_ros.core.prompts.reasoning import (
    format_question,
    parse_choices,
)
from embodied_r_ros.core.qa.answer_parser import (
    DEFAULT_LETTERS,
    ParsedAnswer,
    extract_letter,
    is_well_formed,
    parse_reasoning_output,
)
from embodied_r_ros.core.qa.consistency import (
    JUDGE_SETTINGS,
    judge_messages,
    read_judge_letter,
)
from embodied_r_ros.core.types import GenerationSettings

__all__ = [
    "REWARD_RULES",
    "completion_text",
    "format_reward",
    "accuracy_reward",
    "reference_format_reward",
    "reference_accuracy_reward",
    "reference_choice_key",
    "accuracy_reward_for",
    "format_reward_for",
    "ConsistencyReward",
    "ConsistencyStats",
]

# Names of the rule sets a reward can follow: this project's, or the reference code's.
REWARD_RULES: tuple[str, ...] = ("project", "reference")

logger = logging.getLogger("embodied_r_ros.rewards")


# --------------------------------------------------------------------------- helpers


def completion_text(completion: Any) -> str:
    """The generated text of one TRL completion (string or chat-message list)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role") == "assistant"]
        chosen = assistant[-1] if assistant else (messages[-1] if messages else None)
        return _content_text(chosen.get("content")) if chosen else ""
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def _solution_text(solution: Any) -> str:
    """The ground truth as text; a "<answer>...</answer>" wrapper is removed."""
    text = "" if solution is None else str(solution)
    if "<answer>" in text:
        text = parse_reasoning_output(text, "").answer
    return text.strip()


def _solution_letter(solution: Any) -> str | None:
    """The ground-truth letter, read with the rules that read a completion's answer block:
    "C", " c ", "C.", "(C)", "C. left", "Answer: C" and "<answer>C</answer>" give C; a
    text naming no letter ("turn around", "4") gives None."""
    return extract_letter(_solution_text(solution), DEFAULT_LETTERS)


def _free_text_key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip(".,;:!?\"'").strip().casefold()


def _question_at(question: Any, i: int) -> str | None:
    if question is None:
        return None
    if isinstance(question, str):
        return question
    try:
        q = question[i]
    except (IndexError, KeyError, TypeError):
        return None
    return q if isinstance(q, str) else None


def _canonical_question(question: str) -> str:
    try:
        return format_question(question)
    except InvalidRequestError:
        return question


def _valid_letters(question: str | None) -> str:
    if question is None:
        return DEFAULT_LETTERS
    letters = "".join(letter for letter, _ in parse_choices(question))
    return letters or DEFAULT_LETTERS


def _judge(
    completion: Any, solution: Any, question: str | None
) -> tuple[ParsedAnswer, str | None, bool]:
    """Parse one completion; return (parsed, solution letter or None, is correct)."""
    text = completion_text(completion)
    sol_letter = _solution_letter(solution)
    if sol_letter is None:  # free-text ground truth: compare answer text
        parsed = parse_reasoning_output(text, "")
        key = _free_text_key(_solution_text(solution))
        return parsed, None, bool(key) and _free_text_key(parsed.answer) == key
    parsed = parse_reasoning_output(text, _valid_letters(question))
    return parsed, sol_letter, parsed.letter == sol_letter


def _check_lengths(completions: Sequence[Any], **lists: Any) -> None:
    for name, values in lists.items():
        if values is not None and not isinstance(values, str) and len(values) != len(completions):
            raise ValueError(
                f"{name} has {len(values)} entries but there are {len(completions)} completions"
            )


# --------------------------------------------------------------------------- rewards


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 per completion that is exactly <think>..</think><answer>..</answer>, else 0.0."""
    return [1.0 if is_well_formed(completion_text(c)) else 0.0 for c in completions]


def accuracy_reward(
    completions: Sequence[Any], solution: Sequence[Any], **kwargs: Any
) -> list[float]:
    """1.0 per completion whose option letter equals the solution letter, else 0.0."""
    question = kwargs.get("question")
    _check_lengths(completions, solution=solution, question=question)
    return [
        1.0 if _judge(c, solution[i], _question_at(question, i))[2] else 0.0
        for i, c in enumerate(completions)
    ]


# ------------------------------------------------------- reference-code variants
# The reference code's rules, written here from its observable behaviour (see the module
# docstring). They read the whole completion and ignore the question's option list.

_REF_FORMAT = re.compile(r"\A<think>.*?</think>\s*<answer>.*?</answer>\Z", re.DOTALL)
_REF_BOXED = re.compile(r"\$\\boxed\{([A-H])\}\$", re.IGNORECASE)
_REF_ANSWER_WORD = re.compile(r"answer\s+([A-H])", re.IGNORECASE)
# These two consume the character before (and, for the second, after) the letter, as the
# reference's patterns do: "A B" yields only A, because the space is used up by A's match.
_REF_LETTER_DOT = re.compile(r"(?:^|[^A-Za-z])([A-H])\s*\.", re.IGNORECASE)
_REF_LETTER_ALONE = re.compile(r"(?:^|[^A-Za-z])([A-H])(?:$|[^A-Za-z])", re.IGNORECASE)


def reference_choice_key(text: Any) -> str:
    """What the reference code compares for a completion or a ground truth.

    Searched over the whole (stripped) text, first rule that finds something wins: the
    last ``$\\boxed{X}$``; the first "answer X"; the last letter A-H (either case) not
    preceded by a letter and followed by optional spaces and a full stop; the last
    letter A-H standing alone (no letter on either side). Matches do not overlap: the
    character before (and after) a letter belongs to that letter's match. The letter is returned upper
    case. When none is found the upper-cased text itself is returned (so it matches only
    an identical text).
    """
    body = ("" if text is None else str(text)).strip()
    boxed = _REF_BOXED.findall(body)
    if boxed:
        return boxed[-1].upper()
    worded = _REF_ANSWER_WORD.search(body)
    if worded:
        return worded.group(1).upper()
    for pattern in (_REF_LETTER_DOT, _REF_LETTER_ALONE):
        found = pattern.findall(body)
        if found:
            return found[-1].upper()
    return body.upper()


def reference_format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """The reference code's format check: the text starts with <think>, its think block
    is followed (after optional whitespace) by an answer block, and nothing, not even a
    newline, follows the final </answer>. Repeated tags are not rejected."""
    return [1.0 if _REF_FORMAT.match(completion_text(c)) else 0.0 for c in completions]


def reference_accuracy_reward(
    completions: Sequence[Any], solution: Sequence[Any], **kwargs: Any
) -> list[float]:
    """The reference code's accuracy: `reference_choice_key` of the whole completion
    equals `reference_choice_key` of the solution."""
    _check_lengths(completions, solution=solution)
    return [
        1.0 if reference_choice_key(completion_text(c)) == reference_choice_key(solution[i]) else 0.0
        for i, c in enumerate(completions)
    ]


def _check_rule(rule: str, what: str) -> None:
    if rule not in REWARD_RULES:
        raise ConfigError(
            f"unknown {what} rule {rule!r}; use one of {list(REWARD_RULES)} "
            "(project = this package's rules, reference = the reference code's)"
        )


def accuracy_reward_for(rule: str = "project") -> Any:
    """`accuracy_reward` ("project") or `reference_accuracy_reward` ("reference")."""
    _check_rule(rule, "accuracy")
    return accuracy_reward if rule == "project" else reference_accuracy_reward


def format_reward_for(rule: str = "project") -> Any:
    """`format_reward` ("project") or `reference_format_reward` ("reference")."""
    _check_rule(rule, "format")
    return format_reward if rule == "project" else reference_format_reward


@dataclass
class ConsistencyStats:
    """Counters of a `ConsistencyReward` since it was made."""

    calls: int = 0  # reference-model calls started
    cache_hits: int = 0  # requests answered from the cache (or a duplicate in the batch)
    rewarded: int = 0  # completions that got 1.0
    fallbacks: dict[str, int] = field(default_factory=dict)  # 0.0 rewards by reason


_LOG_LEVEL = {
    "wrong_answer": logging.DEBUG,
    "reference_disagrees": logging.DEBUG,
    "no_think": logging.INFO,
    "free_text": logging.INFO,
    "unparseable_reply": logging.INFO,
    "model_error": logging.WARNING,
    "timeout": logging.WARNING,
}


class ConsistencyReward:
    """Think-answer consistency reward judged by a frozen reference `Reasoner`.

    Only completions with a correct letter are sent to the model; identical
    (question, think) requests are answered from an LRU cache of ``cache_size`` entries
    and sent once per batch. Calls run concurrently on ``max_workers`` threads. A call
    counts as timed out ``timeout_s`` after it starts; the reasoner is also asked to stop
    at that moment through its ``should_stop`` hook; a backend that then raises
    `CancelledError` or `RequestTimeoutError` is counted as a timeout, any other exception
    as ``model_error``. If a timed-out call never returns, the next batch gets a fresh
    thread pool so a hung model cannot block training (the stuck thread itself ends only
    when the backend's own network/generation limit ends it). Errors and timeouts are
    not cached; replies (including unparseable ones) are.
    """

    def __init__(
        self,
        reasoner: Reasoner,
        *,
        settings: GenerationSettings = JUDGE_SETTINGS,
        max_workers: int = 8,
        timeout_s: float = 60.0,
        cache_size: int = 4096,
        prompts: PromptSet | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.__name__ = "consistency_reward"
        self.reasoner = reasoner
        self.settings = settings
        self.prompts = prompts
        self.max_workers = max_workers
        self.timeout_s = float(timeout_s)
        self.cache_size = max(0, int(cache_size))
        self._cache: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = ConsistencyStats()
        self._executor: ThreadPoolExecutor | None = None

    # ----------------------------------------------------------------- bookkeeping

    @property
    def stats(self) -> ConsistencyStats:
        """A snapshot of the counters."""
        with self._lock:
            return ConsistencyStats(
                self._stats.calls,
                self._stats.cache_hits,
                self._stats.rewarded,
                dict(self._stats.fallbacks),
            )

    def _fallback(self, index: int, reason: str, detail: str = "") -> float:
        with self._lock:
            self._stats.fallbacks[reason] = self._stats.fallbacks.get(reason, 0) + 1
        logger.log(
            _LOG_LEVEL.get(reason, logging.INFO),
            "consistency reward 0 for completion %d: reason=%s%s",
            index,
            reason,
            f" ({detail})" if detail else "",
        )
        return 0.0

    def _cache_get(self, key: tuple[str, str]) -> tuple[bool, str | None]:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                self._stats.cache_hits += 1
                return True, self._cache[key]
            return False, None

    def _cache_put(self, key: tuple[str, str], letter: str | None) -> None:
        if self.cache_size == 0:
            return
        with self._lock:
            self._cache[key] = letter
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle support (TRL may pickle reward callables): drop the lock and threads."""
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_executor"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the worker threads (running calls are not interrupted)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # ----------------------------------------------------------------- model calls

    def _ask_all(
        self, requests: dict[tuple[str, str], list[dict[str, Any]]]
    ) -> dict[tuple[str, str], tuple[str, Any]]:
        """Run the requests concurrently: key -> ("ok", text) | ("error", exc) | ("timeout", None)."""
        if not requests:
            return {}
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self.max_workers, thread_name_prefix="consistency-reward"
            )
        starts: dict[tuple[str, str], float] = {}
        timeout = self.timeout_s

        def call(key: tuple[str, str], messages: list[dict[str, Any]]) -> tuple[str, float]:
            start = time.monotonic()
            starts[key] = start
            try:
                text = self.reasoner.generate(
                    messages,
                    self.settings,
                    should_stop=lambda: time.monotonic() - start > timeout,
                )
            except (CancelledError, RequestTimeoutError):
                # Backends raise these when our stop hook fires or their own limit hits.
                return "", math.inf
            return text, time.monotonic() - start

        futures: dict[Future[tuple[str, float]], tuple[str, str]] = {}
        for key, messages in requests.items():
            futures[self._executor.submit(call, key, messages)] = key
        with self._lock:
            self._stats.calls += len(requests)

        results: dict[tuple[str, str], tuple[str, Any]] = {}
        rounds = math.ceil(len(futures) / self.max_workers) + 1
        hard_deadline = time.monotonic() + timeout * rounds
        pending = set(futures)
        abandoned = False
        while pending:
            now = time.monotonic()
            for fut in list(pending):
                start = starts.get(futures[fut])
                if fut.done():
                    continue
                if (start is not None and now - start >= timeout) or now >= hard_deadline:
                    pending.discard(fut)
                    if not fut.cancel():
                        abandoned = True
                    results[futures[fut]] = ("timeout", None)
            if not pending:
                break
            deadlines = [hard_deadline] + [
                starts[futures[f]] + timeout for f in pending if futures[f] in starts
            ]
            done, _ = wait(
                pending, timeout=max(0.0, min(deadlines) - now) + 0.001, return_when=FIRST_COMPLETED
            )
            for fut in done:
                pending.discard(fut)
                key = futures[fut]
                exc = fut.exception()
                if exc is not None:
                    results[key] = ("error", exc)
                else:
                    text, elapsed = fut.result()
                    results[key] = ("timeout", None) if elapsed > timeout else ("ok", text)
        if abandoned:  # some threads are stuck in the model: give the next batch new ones
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        return results

    # ----------------------------------------------------------------- reward

    def __call__(
        self,
        completions: Sequence[Any],
        solution: Sequence[Any],
        question: Sequence[str],
        **kwargs: Any,
    ) -> list[float]:
        """One reward per completion: 1.0 iff correct and the reference model agrees."""
        _check_lengths(completions, solution=solution, question=question)
        rewards = [0.0] * len(completions)
        waiting: dict[tuple[str, str], list[tuple[int, str]]] = {}
        requests: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for i, completion in enumerate(completions):
            raw_q = _question_at(question, i)
            parsed, sol_letter, correct = _judge(completion, solution[i], raw_q)
            if sol_letter is None:
                self._fallback(i, "free_text", "the question has no option letters")
                continue
            if not correct:
                self._fallback(i, "wrong_answer", f"answer {parsed.letter!r} vs {sol_letter!r}")
                continue
            if not parsed.think:
                self._fallback(i, "no_think", "the completion has no reasoning text")
                continue
            q_text = _canonical_question(raw_q or "")
            key = (q_text, parsed.think)
            hit, letter = self._cache_get(key)
            if hit:
                rewards[i] = self._score(i, letter, sol_letter, "")
                continue
            if key in waiting:
                with self._lock:
                    self._stats.cache_hits += 1
            else:
                requests[key] = judge_messages(q_text, parsed.think, self.prompts)
            waiting.setdefault(key, []).append((i, sol_letter))

        results = self._ask_all(requests)
        for key, members in waiting.items():
            status, value = results.get(key, ("timeout", None))
            if status == "ok":
                letter = read_judge_letter(value, key[0])
                self._cache_put(key, letter)
                for i, sol_letter in members:
                    rewards[i] = self._score(i, letter, sol_letter, value)
            elif status == "error":
                for i, _ in members:
                    self._fallback(i, "model_error", f"{type(value).__name__}: {value}")
            else:
                for i, _ in members:
                    self._fallback(i, "timeout", f"no reply within {self.timeout_s:g} s")
        return rewards

    def _score(self, index: int, letter: str | None, sol_letter: str, reply: str) -> float:
        if letter is None:
            return self._fallback(index, "unparseable_reply", f"reply {reply[:80]!r}")
        if letter != sol_letter:
            return self._fallback(
                index, "reference_disagrees", f"reference chose {letter}, policy {sol_letter}"
            )
        with self._lock:
            self._stats.rewarded += 1
        return 1.0
