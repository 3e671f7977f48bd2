"""Format, accuracy and consistency rewards; the project's rules and the reference's.

The consistency reward needs a frozen reference model. `RuleReasoner` below is a small,
real implementation of the `Reasoner` protocol (not a mock of a library): it reads the
reasoning text in the request and answers the letter the reasoning says it picks
("pick B"), or misbehaves on purpose when the reasoning contains RAISE / SLOW /
GIBBERISH, so each fallback path of the reward runs for real, threads and timeouts
included. The transformers and HTTP reasoners are tested by their own suites.
"""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest

from embodied_r_ros.core.backends.base import Reasoner
from embodied_r_ros.core.errors import CancelledError, ConfigError, ReasoningError
from embodied_r_ros.core.prompts.reasoning import format_question
from embodied_r_ros.core.types import GenerationSettings
from embodied_r_training.rewards import (
    ConsistencyReward,
    accuracy_reward,
    accuracy_reward_for,
    completion_text,
    format_reward,
    format_reward_for,
    reference_accuracy_reward,
    reference_choice_key,
    reference_format_reward,
)

from helpers.env import REPO_ROOT

Q3 = format_question("Where is the door?", ["left", "right", "back"])
Q_FREE = format_question("How do I get back to the red car?")
Q_RAW = (
    "<video>Please assume the role of an agent. The video represents your egocentric "
    "observations from the past to the present. Question: Which is closest to the door?"
    "\n\nChoices: \nA. computer tower\nB. chair\nC. whiteboard\nD. telephone\n"
)
TIMEOUT_S = 0.3


class RuleReasoner:
    """Deterministic reference model: answers the letter after "pick" in the reasoning."""

    name = "rule"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.settings_seen: list[GenerationSettings | None] = []
        self.release = threading.Event()
        self._lock = threading.Lock()

    def generate(self, messages, settings=None, on_text=None, should_stop=None) -> str:
        user = messages[-1]["content"]
        reasoning = user.split("Reasoning:", 1)[1]
        with self._lock:
            self.calls.append(reasoning)
            self.settings_seen.append(settings)
        if "RAISE" in reasoning:
            raise ReasoningError("reference server returned 500")
        if "SLOW" in reasoning:  # honours the stop hook, but only after the deadline
            while not (should_stop and should_stop()):
                time.sleep(0.01)
            return "A"
        if "HANG" in reasoning:  # ignores the stop hook entirely
            self.release.wait(5)
            return "A"
        if "GIBBERISH" in reasoning:
            return "I would rather not say."
        m = re.search(r"pick ([A-H])", reasoning)
        return m.group(1) if m else "A"

    def generate_batch(self, conversations, settings=None):
        return [self.generate(c, settings) for c in conversations]

    def close(self) -> None:
        self.release.set()


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


# (label, completion, solution, question, format, accuracy, consistency)
TABLE = [
    ("perfect", "<think>door left, pick A</think><answer>A</answer>", "A", Q3, 1, 1, 1),
    ("whitespace", "\n<think> pick B </think>\n\n<answer> B </answer>\n", "B", Q3, 1, 1, 1),
    ("no think", "<answer>A</answer>", "A", Q3, 0, 1, 0),
    ("no answer", "<think>pick A</think>", "A", Q3, 0, 0, 0),
    ("letter after think, no tags", "<think>after: pick A</think> A", "A", Q3, 0, 1, 1),
    ("two answers, last wins", "<think>two answers: pick C</think><answer>A</answer><answer>C</answer>",
     "C", Q3, 0, 1, 1),
    ("two thinks", "<think>two thinks: pick B</think><think>more</think><answer>B</answer>", "B", Q3, 0, 1, 1),
    ("lowercase letter", "<think>lowercase: pick B</think><answer>b</answer>", "B", Q3, 1, 1, 1),
    ("letter with period", "<think>period: pick B</think><answer>B.</answer>", "B", Q3, 1, 1, 1),
    ("letter in parentheses", "<think>parens: pick C</think><answer>(C)</answer>", "C", Q3, 1, 1, 1),
    ("letter with text", "<think>with text: pick B</think><answer>B) right</answer>", "B", Q3, 1, 1, 1),
    ("answer label", "<think>label: pick C</think><answer>Answer: C</answer>", "C", Q3, 1, 1, 1),
    ("markdown bold", "<think>bold: pick B</think><answer>**B**</answer>", "B", Q3, 1, 1, 1),
    ("text after answer", "<think>trailing: pick A</think><answer>A</answer> extra", "A", Q3, 0, 1, 1),
    ("text before think", "Sure! <think>leading: pick A</think><answer>A</answer>", "A", Q3, 0, 1, 1),
    ("nested tags", "<think><think>nested: pick A</think></think><answer>A</answer>", "A", Q3, 0, 1, 1),
    ("empty think", "<think></think><answer>A</answer>", "A", Q3, 1, 1, 0),
    ("blank think", "<think>  \n </think><answer>A</answer>", "A", Q3, 1, 1, 0),
    ("plain letter only", "A", "A", Q3, 0, 1, 0),
    ("wrong answer", "<think>pick B</think><answer>B</answer>", "A", Q3, 1, 0, 0),
    ("not an option", "<think>pick D</think><answer>D</answer>", "A", Q3, 1, 0, 0),
    ("article, not letter", "<think>pick A</think><answer>a chair</answer>", "A", Q3, 1, 0, 0),
    ("two letters", "<think>pick A</think><answer>A or B</answer>", "A", Q3, 1, 0, 0),
    ("free text right", "<think>walk back</think><answer>Turn around.</answer>", "turn around", Q_FREE, 1, 1, 0),
    ("free text wrong", "<think>walk back</think><answer>Go left</answer>", "turn around", Q_FREE, 1, 0, 0),
    ("chat message", chat("<think>pick A, chat</think><answer>A</answer>"), "A", Q3, 1, 1, 1),
    ("chat content parts", [{"role": "assistant", "content": [
        {"type": "text", "text": "<think>pick C, parts</think><answer>C</answer>"}]}], "C", Q3, 1, 1, 1),
    ("reference disagrees", "<think>I doubt it: pick B</think><answer>A</answer>", "A", Q3, 1, 1, 0),
    ("reference raises", "<think>RAISE, pick A</think><answer>A</answer>", "A", Q3, 1, 1, 0),
    ("reference times out", "<think>SLOW, pick A</think><answer>A</answer>", "A", Q3, 1, 1, 0),
    ("unparseable reply", "<think>GIBBERISH</think><answer>A</answer>", "A", Q3, 1, 1, 0),
    ("raw dataset question", "<think>pick C</think><answer>C</answer>", "C", Q_RAW, 1, 1, 1),
    ("wrapped solution", "<think>pick B, wrapped</think><answer>B</answer>", "<answer>B</answer>", Q3, 1, 1, 1),
    ("repeat of perfect (cache)", "<think>door left, pick A</think><answer>A</answer>", "A", Q3, 1, 1, 1),
]
LABELS = [row[0] for row in TABLE]
COMPLETIONS = [row[1] for row in TABLE]
SOLUTIONS = [row[2] for row in TABLE]
QUESTIONS = [row[3] for row in TABLE]


@pytest.fixture
def reasoner():
    r = RuleReasoner()
    yield r
    r.close()


@pytest.fixture
def reward(reasoner):
    cr = ConsistencyReward(reasoner, max_workers=4, timeout_s=TIMEOUT_S)
    yield cr
    cr.close()


def _expected(column: int) -> list[float]:
    return [float(row[column]) for row in TABLE]


def test_table_has_enough_cases():
    assert len(TABLE) >= 30 and len(set(LABELS)) == len(LABELS)


def test_format_reward_table():
    got = format_reward(COMPLETIONS, solution=SOLUTIONS, question=QUESTIONS)
    assert dict(zip(LABELS, got)) == dict(zip(LABELS, _expected(4)))


def test_accuracy_reward_table():
    got = accuracy_reward(COMPLETIONS, solution=SOLUTIONS, question=QUESTIONS)
    assert dict(zip(LABELS, got)) == dict(zip(LABELS, _expected(5)))


def test_consistency_reward_table(reward, reasoner, caplog):
    caplog.set_level(logging.DEBUG, logger="embodied_r_ros.rewards")
    start = time.monotonic()
    got = reward(
        completions=COMPLETIONS, solution=SOLUTIONS, question=QUESTIONS,
        prompts=["p"] * len(TABLE), trainer_state=None,  # extra TRL kwargs are ignored
    )
    elapsed = time.monotonic() - start
    assert dict(zip(LABELS, got)) == dict(zip(LABELS, _expected(6)))
    assert elapsed < 3.0  # one timeout, not one per call

    # Only correct answers with reasoning reach the model; identical requests go once.
    correct_with_think = [
        row for row in TABLE if row[5] == 1 and row[6] is not None and row[3] is not Q_FREE
        and row[0] not in ("no think", "empty think", "blank think", "plain letter only")
    ]
    assert len(reasoner.calls) == len(correct_with_think) - 1  # the repeat was a cache hit
    assert not any("pick D" in c or "a chair" in c for c in reasoner.calls)
    assert all(s == GenerationSettings(temperature=0.1, max_new_tokens=10) for s in reasoner.settings_seen)

    stats = reward.stats
    assert stats.calls == len(reasoner.calls)
    assert stats.cache_hits == 1
    assert stats.rewarded == sum(_expected(6))
    assert stats.fallbacks == {
        "no_think": 4,
        "wrong_answer": 5,  # no answer, wrong, not an option, article, two letters
        "free_text": 2,
        "reference_disagrees": 1,
        "model_error": 1,
        "timeout": 1,
        "unparseable_reply": 1,
    }
    reasons = {r.getMessage().split("reason=")[1].split(" ")[0] for r in caplog.records}
    assert reasons == set(stats.fallbacks)
    assert any(r.levelno == logging.WARNING and "ReasoningError" in r.getMessage() for r in caplog.records)


def test_cache_across_calls_and_lru_eviction(reasoner):
    cr = ConsistencyReward(reasoner, max_workers=2, timeout_s=2.0, cache_size=2)
    try:
        batch = [f"<think>pick A, case {i}</think><answer>A</answer>" for i in range(3)]
        assert cr(batch, ["A"] * 3, [Q3] * 3) == [1.0, 1.0, 1.0]
        assert len(reasoner.calls) == 3
        # Cases 1 and 2 are cached; case 0 was evicted (cache holds 2).
        assert cr(batch[1:], ["A"] * 2, [Q3] * 2) == [1.0, 1.0]
        assert len(reasoner.calls) == 3 and cr.stats.cache_hits == 2
        assert cr(batch[:1], ["A"], [Q3]) == [1.0]
        assert len(reasoner.calls) == 4
        # The same reasoning under another question is a different request.
        q2 = format_question("Where is the window?", ["left", "right", "back"])
        assert cr(batch[1:2], ["A"], [q2]) == [1.0]
        assert len(reasoner.calls) == 5
    finally:
        cr.close()


def test_errors_are_not_cached(reasoner):
    cr = ConsistencyReward(reasoner, timeout_s=2.0)
    try:
        batch = ["<think>RAISE pick A</think><answer>A</answer>"]
        assert cr(batch, ["A"], [Q3]) == [0.0]
        assert cr(batch, ["A"], [Q3]) == [0.0]
        assert len(reasoner.calls) == 2 and cr.stats.fallbacks == {"model_error": 2}
    finally:
        cr.close()


def test_calls_run_concurrently():
    class BarrierReasoner(RuleReasoner):
        """Every call waits until four calls are inside generate at once."""

        def __init__(self) -> None:
            super().__init__()
            self.barrier = threading.Barrier(4, timeout=2.0)

        def generate(self, messages, settings=None, on_text=None, should_stop=None):
            self.barrier.wait()
            return super().generate(messages, settings, on_text, should_stop)

    r = BarrierReasoner()
    cr = ConsistencyReward(r, max_workers=4, timeout_s=5.0)
    try:
        batch = [f"<think>pick B, n{i}</think><answer>B</answer>" for i in range(4)]
        assert cr(batch, ["B"] * 4, [Q3] * 4) == [1.0] * 4
    finally:
        cr.close()


def test_hung_model_does_not_block_the_next_batch(reasoner):
    cr = ConsistencyReward(reasoner, max_workers=1, timeout_s=TIMEOUT_S)
    try:
        start = time.monotonic()
        assert cr(["<think>HANG pick A</think><answer>A</answer>"], ["A"], [Q3]) == [0.0]
        # The only worker is still stuck in the model; a fresh pool serves this batch.
        assert cr(["<think>pick A, after hang</think><answer>A</answer>"], ["A"], [Q3]) == [1.0]
        assert time.monotonic() - start < 4.0  # the hung call holds its worker for 5 s
        assert cr.stats.fallbacks == {"timeout": 1}
    finally:
        reasoner.release.set()
        cr.close()


def test_backend_that_raises_on_stop_counts_as_timeout():
    class StopRaisingReasoner(RuleReasoner):
        """Like the real backends: raises CancelledError once should_stop() turns True."""

        def generate(self, messages, settings=None, on_text=None, should_stop=None):
            while not should_stop():
                time.sleep(0.01)
            raise CancelledError("generation stopped")

    cr = ConsistencyReward(StopRaisingReasoner(), timeout_s=0.1)
    try:
        assert cr(["<think>pick A</think><answer>A</answer>"], ["A"], [Q3]) == [0.0]
        assert cr.stats.fallbacks == {"timeout": 1}
    finally:
        cr.close()


class PickleableReasoner:
    """Minimal protocol implementation without locks, so it can be pickled."""

    name = "pickleable"

    def generate(self, messages, settings=None, on_text=None, should_stop=None):
        return "B"

    def generate_batch(self, conversations, settings=None):
        return ["B" for _ in conversations]

    def close(self):
        pass


def test_consistency_reward_survives_pickling():
    import pickle

    cr = ConsistencyReward(PickleableReasoner(), timeout_s=2.0)
    comps = ["<think>so B</think><answer>B</answer>"]
    assert cr(comps, ["B"], [Q3]) == [1.0]
    clone = pickle.loads(pickle.dumps(cr))
    try:
        assert clone(comps, ["B"], [Q3]) == [1.0]
        assert clone.stats.cache_hits == 1  # the cache travelled with it
    finally:
        clone.close()
        cr.close()


def test_consistency_reward_is_named_and_satisfies_protocol(reward, reasoner):
    assert reward.__name__ == "consistency_reward"
    assert isinstance(reasoner, Reasoner)


def test_trl_call_shape_and_length_checks():
    comps = [chat("<think>pick A</think><answer>A</answer>")]
    assert format_reward(prompts=[[{"role": "user", "content": "q"}]], completions=comps) == [1.0]
    assert accuracy_reward(completions=comps, solution=["A"]) == [1.0]  # no question: A-H
    assert accuracy_reward(completions=["<answer>H</answer>"], solution=["H"]) == [1.0]
    with pytest.raises(ValueError):
        accuracy_reward(completions=comps, solution=["A", "B"])
    assert completion_text([{"role": "user", "content": "u"}, {"role": "assistant", "content": "x"}]) == "x"
    assert completion_text(None) == ""


def test_ground_truth_is_read_like_the_answer_block():
    """A solution written "B. right" (or "(b)", "Answer: B", "<answer>B</answer>") is B."""
    good = "<think>pick B</think><answer>B</answer>"
    for solution in ("B", " b ", "B.", "(B)", "B. right", "B) right", "Answer: B", "<answer>B. right</answer>"):
        assert accuracy_reward([good], solution=[solution], question=[Q3]) == [1.0], solution
        assert accuracy_reward(["<think>pick A</think><answer>A</answer>"], solution=[solution],
                               question=[Q3]) == [0.0], solution
    # A completion answering with the option text plus its letter also matches.
    assert accuracy_reward(["<think>x</think><answer>B. right</answer>"], solution=["B. right"],
                           question=[Q3]) == [1.0]
    # A solution naming no letter stays a free-text answer.
    assert accuracy_reward(["<think>x</think><answer>a chair</answer>"], solution=["a chair"],
                           question=[Q_FREE]) == [1.0]


# (label, completion, solution, project accuracy, reference accuracy)
LETTER_RULES = [
    ("plain", "<think>so A</think><answer>A</answer>", "A", 1, 1),
    ("solution with text", "<think>so B</think><answer>B</answer>", "B. right", 1, 1),
    # The reference reads the whole completion: its last "X." is in the reasoning here.
    ("letter in reasoning", "<think>B. is ruled out</think><answer>A</answer>", "A", 1, 0),
    ("answer word in reasoning", "<think>the answer C looks wrong</think><answer>A</answer>", "A", 1, 0),
    ("boxed wins", "<think>hm</think><answer>$\\boxed{D}$ or A.</answer>", "D", 0, 1),
    ("article read as A", "<think>it is a chair</think><answer>a chair</answer>", "A", 0, 1),
    ("two stand-alone letters", "<think>x</think><answer>A or B</answer>", "A", 0, 0),
    ("lowercase letter", "<think>x</think><answer>c</answer>", "C", 1, 1),
    ("no letter", "<think>x</think><answer>none</answer>", "A", 0, 0),
]


def test_letter_rules_project_and_reference():
    comps = [row[1] for row in LETTER_RULES]
    sols = [row[2] for row in LETTER_RULES]
    labels = [row[0] for row in LETTER_RULES]
    q4 = format_question("Which one?", ["w", "x", "y", "z"])
    project = accuracy_reward(comps, solution=sols, question=[q4] * len(comps))
    reference = reference_accuracy_reward(comps, solution=sols, question=[q4] * len(comps))
    assert dict(zip(labels, project)) == {r[0]: float(r[3]) for r in LETTER_RULES}
    assert dict(zip(labels, reference)) == {r[0]: float(r[4]) for r in LETTER_RULES}
    assert accuracy_reward_for("project") is accuracy_reward
    assert accuracy_reward_for("reference") is reference_accuracy_reward
    with pytest.raises(ConfigError, match="unknown accuracy rule 'strict'"):
        accuracy_reward_for("strict")


def test_reference_choice_key_worked_values():
    assert reference_choice_key("B. right") == "B"
    assert reference_choice_key("(b)") == "B"
    assert reference_choice_key("A B") == "A"  # matches do not overlap: B's space is taken
    assert reference_choice_key("A.B.") == "A"
    assert reference_choice_key("so the answer e fits") == "E"
    assert reference_choice_key("4") == "4" and reference_choice_key(" turn left ") == "TURN LEFT"


# (label, completion, project format, reference format)
FORMAT_RULES = [
    ("exact", "<think>a</think><answer>B</answer>", 1, 1),
    ("newline between", "<think>a</think>\n\n<answer>B</answer>", 1, 1),
    ("leading whitespace", "\n<think>a</think><answer>B</answer>", 1, 0),
    ("trailing newline", "<think>a</think><answer>B</answer>\n", 1, 0),
    ("repeated think", "<think>a</think><think>b</think><answer>B</answer>", 0, 1),
    ("repeated answer", "<think>a</think><answer>A</answer><answer>B</answer>", 0, 1),
    ("text after", "<think>a</think><answer>B</answer> done", 0, 0),
    ("text before", "ok <think>a</think><answer>B</answer>", 0, 0),
    ("no think", "<answer>B</answer>", 0, 0),
]


def test_format_rules_project_and_reference():
    comps = [row[1] for row in FORMAT_RULES]
    labels = [row[0] for row in FORMAT_RULES]
    assert dict(zip(labels, format_reward(comps))) == {r[0]: float(r[2]) for r in FORMAT_RULES}
    assert dict(zip(labels, reference_format_reward(comps))) == {r[0]: float(r[3]) for r in FORMAT_RULES}
    assert format_reward_for("reference") is reference_format_reward
    assert format_reward_for() is format_reward
    with pytest.raises(ConfigError):
        format_reward_for("loose")


def test_rewards_import_without_torch_or_ros():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'rclpy', 'trl'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import embodied_r_training.rewards, embodied_r_ros.core.memory.episode\n"
        "import embodied_r_ros.core.perception.parser, embodied_r_ros.core.qa.answer_parser\n"
        "print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


def test_consistency_judge_prompt_comes_from_the_prompts_file(tmp_path, monkeypatch):
    """rewards.consistency.prompts_file: the judge is asked with the file's consistency
    templates, the same file and templates the robot's self-check uses."""
    from embodied_r_training.reward_funcs import make_consistency_reward

    prompt_file = tmp_path / "p.yaml"
    prompt_file.write_text("consistency:\n  system: 'JUDGE SYSTEM'\n"
                           "  user: 'JUDGE {question} Reasoning: {reasoning} Letter only.'\n")
    seen: list[list[dict]] = []

    class Recording(RuleReasoner):
        def generate(self, messages, settings=None, on_text=None, should_stop=None):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            return super().generate(messages, settings, on_text, should_stop)

    import embodied_r_ros.core.backends.factory as factory

    monkeypatch.setattr(factory, "make_reasoner", lambda spec: Recording())  # scripted judge
    reward = make_consistency_reward({"backend": "openai", "model": "judge",
                                      "base_url": "http://127.0.0.1:9"},
                                     {"prompts_file": str(prompt_file)})
    got = reward(["<think>pick B</think><answer>B</answer>"], solution=["B"], question=[Q3])
    assert got == [1.0]
    assert seen[0][0] == {"role": "system", "content": "JUDGE SYSTEM"}
    assert seen[0][1]["content"].startswith("JUDGE Question:")


def test_the_judges_decoding_comes_from_its_model_spec_unless_the_options_set_it(monkeypatch):
    """consistency_model's temperature / max_new_tokens were once ignored (the judge always
    got 10 tokens): a judge that writes more than a letter was cut off silently."""
    import embodied_r_ros.core.backends.factory as factory
    from embodied_r_training.reward_funcs import make_consistency_reward

    monkeypatch.setattr(factory, "make_reasoner", lambda spec: RuleReasoner())
    spec = {"backend": "openai", "model": "judge", "base_url": "http://127.0.0.1:9"}
    assert make_consistency_reward(spec).settings.max_new_tokens == 10  # the reference setting
    got = make_consistency_reward({**spec, "temperature": 0.0, "max_new_tokens": 64}).settings
    assert (got.temperature, got.max_new_tokens) == (0.0, 64)
    got = make_consistency_reward({**spec, "max_new_tokens": 64}, {"max_new_tokens": 32}).settings
    assert (got.temperature, got.max_new_tokens) == (0.1, 32)
