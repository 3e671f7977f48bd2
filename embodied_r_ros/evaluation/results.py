"""Results of a replay evaluation: one record per question, stored as they come, and
the summary written from them (JSON, markdown, PNG).

Files, for ``--out results/run1.json``:

* ``results/run1.results.jsonl`` - append-only, one line per answered question, keyed by
  question id and fsync'ed before the next question is asked. A killed run is resumed by
  running the same command again: questions with a line here are not asked again; a line
  cut short by the kill is ignored (that question is asked once more).
* ``results/run1.episodes.jsonl`` - append-only, one line per replayed bag: what reading
  it did (frame counts, stamp fallbacks, dropped frames, size changes, warnings), the key
  frames chosen and the frame descriptions, and the replay time.
* ``results/run1.run.json`` - the run's setup (mode, models, question file); resuming
  with another mode or other models is refused, so one results file never mixes them.
* ``results/run1.json`` (summary: accuracy per category, latency per stage, failures,
  per-question rows), ``results/run1.md`` (the same as tables) and ``results/run1.png``
  (accuracy per category and latency per stage), rewritten at the end of every run.

With ``--shard i/n`` every file name carries the shard (``run1.shard0of4.results.jsonl``,
``run1.shard0of4.json`` ...), so shards never overwrite each other; ``--report-only``
with the plain ``--out`` merges every shard's results found beside it into
``run1.json`` / ``.md`` / ``.png``.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.append_only import AppendOnlyJsonl
from embodied_r_ros.core.errors import ErrorCode, InvalidRequestError
from embodied_r_ros.evaluation.questions import QuestionItem

STAGES = ("perception_s", "reasoning_s", "total_s")


def _code_name(code: int) -> str:
    try:
        return ErrorCode(int(code)).name
    except ValueError:
        return f"UNKNOWN_{code}"


@dataclass
class QuestionResult:
    """One asked question and what the pipeline answered (either replay mode)."""

    question_id: str
    bag: str
    category: str
    question: str
    choices: list[str]
    ground_truth: str
    success: bool
    error_code: int
    message: str = ""
    answer: str = ""
    answer_text: str = ""
    reasoning: str = ""
    raw_output: str = ""
    keyframes_used: int = 0
    episode_id: str = ""
    perception_s: float = 0.0
    reasoning_s: float = 0.0
    total_s: float = 0.0
    correct: bool | None = None  # None: no ground truth or no lettered options
    prompt: list[dict[str, Any]] = field(default_factory=list)  # exact reasoning-LM input
    mode: str = ""

    @classmethod
    def make(cls, item: QuestionItem, bag: str, mode: str, *, success: bool, error_code: int,
             answer: str = "", prompt: Sequence[Mapping[str, Any]] = (), **fields: Any
             ) -> QuestionResult:
        correct = (bool(success) and answer.strip().upper() == item.answer.strip().upper()
                   ) if item.scored else None
        return cls(question_id=item.question_id, bag=bag, category=item.category,
                   question=item.question, choices=list(item.choices),
                   ground_truth=item.answer, success=bool(success), error_code=int(error_code),
                   answer=answer, correct=correct, prompt=[dict(m) for m in prompt], mode=mode,
                   **fields)

    @classmethod
    def from_answer(cls, item: QuestionItem, bag: str, mode: str, result: Any) -> QuestionResult:
        """From a core `AnswerResult` (fast mode)."""
        t = result.timing
        return cls.make(item, bag, mode, success=result.success, error_code=result.error_code,
                        answer=result.answer, prompt=result.messages, message=result.message,
                        answer_text=result.answer_text, reasoning=result.reasoning,
                        raw_output=result.raw_output, keyframes_used=result.keyframes_used,
                        episode_id=result.episode_id, perception_s=float(t.perception_s),
                        reasoning_s=float(t.reasoning_s), total_s=float(t.total_s))

    @classmethod
    def failed(cls, item: QuestionItem, bag: str, mode: str, code: ErrorCode,
               message: str) -> QuestionResult:
        return cls.make(item, bag, mode, success=False, error_code=int(code), message=message)

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["error_name"] = _code_name(self.error_code)  # beside the number, for people
        return row

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> QuestionResult:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in row.items() if k in known})


class ResultStore:
    """The append-only results and episodes files of one run (module docstring). With a
    shard, its files carry the shard in their names (``<stem>.shard<i>of<n>.results.jsonl``)
    so that shards run in one folder, or copied into one, never collide."""

    def __init__(self, out_json: str | Path, shard: Any = None) -> None:
        self.out_json = Path(out_json)
        self.stem = self.out_json.with_suffix("")
        part = shard.suffix if shard is not None else ""
        self.results = AppendOnlyJsonl(f"{self.stem}{part}.results.jsonl")
        self.episodes = AppendOnlyJsonl(f"{self.stem}{part}.episodes.jsonl")
        self.run_file = Path(f"{self.stem}{part}.run.json")
        # A shard's summary carries the shard's name; `--report-only` writes the merged
        # one under the plain name.
        self.summary_json = Path(f"{self.stem}{part}.json") if part else self.out_json
        self.markdown = Path(f"{self.stem}{part}.md")
        self.plot = Path(f"{self.stem}{part}.png")

    def _all(self, kind: str, own: AppendOnlyJsonl, all_shards: bool) -> list[AppendOnlyJsonl]:
        if not all_shards:
            return [own]
        folder, name = self.stem.parent, self.stem.name
        paths = {folder / f"{name}.{kind}.jsonl", *folder.glob(f"{name}.shard*of*.{kind}.jsonl")}
        return [AppendOnlyJsonl(p) for p in sorted(paths)]

    def check_setup(self, setup: Mapping[str, Any], *, fresh: bool = False) -> None:
        """Record the run's setup; refuse to resume a run made with another one."""
        if fresh:
            for path in (self.results.path, self.episodes.path, self.run_file):
                path.unlink(missing_ok=True)
        if self.run_file.exists() and self.results.path.exists():
            old = json.loads(self.run_file.read_text(encoding="utf-8"))
            changed = {k: (old.get(k), setup.get(k)) for k in RESUME_KEYS
                       if old.get(k) != setup.get(k)}
            if changed:
                what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                raise InvalidRequestError(
                    f"{self.results.path} holds results of another setup ({what}); use another "
                    "--out, or --fresh to discard them")
        self.run_file.parent.mkdir(parents=True, exist_ok=True)
        self.run_file.write_text(json.dumps(dict(setup), indent=2) + "\n", encoding="utf-8")

    def setup(self) -> dict[str, Any]:
        """The recorded setup of this run ({} when none)."""
        if not self.run_file.exists():
            return {}
        return json.loads(self.run_file.read_text(encoding="utf-8"))

    def done(self, *, all_shards: bool = False) -> dict[str, QuestionResult]:
        """Question id -> stored result (the last line wins); `all_shards` also reads the
        shard files beside this run's."""
        out: dict[str, QuestionResult] = {}
        for store in self._all("results", self.results, all_shards):
            out.update({row["question_id"]: QuestionResult.from_json(row) for row in store.read()})
        return out

    def add(self, result: QuestionResult) -> None:
        self.results.append(result.to_json())

    def add_episode(self, record: Mapping[str, Any]) -> None:
        self.episodes.append(record)

    def episode_records(self, *, all_shards: bool = False) -> dict[str, dict[str, Any]]:
        """Bag -> its latest episode record."""
        out: dict[str, dict[str, Any]] = {}
        for store in self._all("episodes", self.episodes, all_shards):
            out.update({row["bag"]: row for row in store.read()})
        return out


# Settings whose change makes stored answers incomparable with new ones.
RESUME_KEYS = ("mode", "perception_model", "reasoning_model", "perception_mode",
               "questions")


# --------------------------------------------------------------------------- summary
def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"median": 0.0, "mean": 0.0, "p90": 0.0, "max": 0.0}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": float(statistics.median(ordered)), "mean": float(statistics.fmean(ordered)),
            "p90": float(p90), "max": float(ordered[-1])}


NO_CATEGORY = "(no category)"  # questions whose record names none


def accuracy_by_category(results: Iterable[QuestionResult]) -> dict[str, float]:
    """Accuracy (%) per category over the scored questions, plus "average" over all of
    them (question-weighted)."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        if r.correct is not None:
            groups[r.category or NO_CATEGORY].append(r.correct)
    table = {k: 100.0 * sum(v) / len(v) for k, v in sorted(groups.items())}
    scored = [c for v in groups.values() for c in v]
    if scored:
        table["average"] = 100.0 * sum(scored) / len(scored)
    return table


def summarize(results: Sequence[QuestionResult], *, expected: int | None = None,
              episodes: Mapping[str, Mapping[str, Any]] | None = None,
              bag_errors: Mapping[str, str] | None = None,
              setup: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary JSON: accuracy, latency per stage, failures, per-question rows."""
    results = list(results)
    counts: Counter[str] = Counter()
    for r in results:
        if r.correct is not None:
            counts[r.category or NO_CATEGORY] += 1
    latency = {stage: _stats([getattr(r, stage) for r in results]) for stage in STAGES}
    failures = Counter(ErrorCode(r.error_code).name for r in results if not r.success)
    summary: dict[str, Any] = {
        "setup": dict(setup or {}),
        "questions": len(results),
        "expected_questions": len(results) if expected is None else expected,
        "accuracy": accuracy_by_category(results),
        "count": dict(sorted(counts.items())),
        # Flat medians, as earlier versions wrote them (total/perception/reasoning).
        "latency": {"total_s_median": latency["total_s"]["median"],
                    "perception_s_median": latency["perception_s"]["median"],
                    "reasoning_s_median": latency["reasoning_s"]["median"],
                    "total_s_max": latency["total_s"]["max"]},
        "latency_per_stage": latency,
        "failures": dict(sorted(failures.items())),
        "bags": len(episodes or {}),
        "bag_errors": dict(bag_errors or {}),
        "replay_warnings": sum(len(e.get("read", {}).get("warnings", []))
                               for e in (episodes or {}).values()),
        # Per bag: frames sent (published / handed on) and received by the pipeline; a
        # live replay that lost frames is "lossy" (its key frames can differ from fast mode).
        "frames": frames_per_bag(episodes or {}),
        "lossy_bags": sorted(k for k, v in frames_per_bag(episodes or {}).items()
                             if v["lossy"]),
        # Per category: failures by code name (a 0 % bar made of failures says so).
        "failures_by_category": _failures_by_category(results),
        "results": [r.to_json() for r in results],
    }
    return summary


def frames_per_bag(episodes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for bag, e in sorted(episodes.items()):
        sent, received = int(e.get("frames_published", 0)), int(e.get("frames_received", 0))
        out[bag] = {"sent": sent, "received": received, "lost": max(0, sent - received),
                    "lossy": received < sent, "mode": e.get("mode", "")}
    return out


def _failures_by_category(results: Sequence[QuestionResult]) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        if not r.success:
            table[r.category or NO_CATEGORY][_code_name(r.error_code)] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(table.items())}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def models_line(setup: Mapping[str, Any]) -> str:
    """"models: VLM / LM" from a run's setup record, flagged when they are the tiny ones."""
    if not setup.get("perception_model") and not setup.get("reasoning_model"):
        return ""
    tiny = " (TINY RANDOM MODELS: answers are noise)" if setup.get("tiny_models") else ""
    return (f"models: perception {Path(str(setup.get('perception_model', ''))).name or '-'}, "
            f"reasoning {Path(str(setup.get('reasoning_model', ''))).name or '-'}{tiny}")


def frames_line(summary: Mapping[str, Any]) -> str:
    frames = summary.get("frames", {})
    if not frames:
        return ""
    sent = sum(v["sent"] for v in frames.values())
    received = sum(v["received"] for v in frames.values())
    text = f"frames received {received} of {sent} sent"
    lossy = summary.get("lossy_bags", [])
    if lossy:
        text += (f" - LOSSY replay ({_plural(len(lossy), 'bag')} lost frames; key frames can "
                 "differ from --mode fast; --camera-qos reliable replays losslessly)")
    return text


def _category_count(count: Mapping[str, int], name: str) -> int:
    return count.get(name, sum(count.values()) if name == "average" else 0)


def _failure_note(summary: Mapping[str, Any], name: str, n: int) -> str:
    """"all 8 UNPARSEABLE_ANSWER" when every answer of a category failed."""
    by_cat = summary.get("failures_by_category", {})
    fails = (Counter({k: v for c in by_cat.values() for k, v in c.items()})
             if name == "average" else Counter(by_cat.get(name, {})))
    if n and sum(fails.values()) >= n:
        return "all failed: " + ", ".join(f"{v} {k}" for k, v in fails.most_common())
    return ""


def markdown(summary: Mapping[str, Any]) -> str:
    acc, count = summary["accuracy"], summary["count"]
    lines = [f"Questions answered: {summary['questions']} of {summary['expected_questions']}"
             f" ({_plural(summary['bags'], 'bag')})"]
    setup = summary.get("setup", {})
    if models_line(setup):
        lines.append(f"Models: {models_line(setup).removeprefix('models: ')}")
    if frames_line(summary):
        lines.append(f"Frames: {frames_line(summary).removeprefix('frames ')}")
        for bag, f in summary["frames"].items():
            if f["lossy"]:
                lines.append(f"- LOSSY `{bag}`: received {f['received']} of {f['sent']} frames "
                             f"({f['lost']} lost)")
    lines += ["", "| category | questions | accuracy % | note |", "|---|---|---|---|"]
    lines += [f"| {k} | {_category_count(count, k)} | {v:.1f} | "
              f"{_failure_note(summary, k, _category_count(count, k))} |"
              for k, v in acc.items()]
    lines += ["", "| stage | median s | mean s | p90 s | max s |", "|---|---|---|---|---|"]
    for stage, s in summary["latency_per_stage"].items():
        lines.append(f"| {stage.removesuffix('_s')} | {s['median']:.2f} | {s['mean']:.2f} | "
                     f"{s['p90']:.2f} | {s['max']:.2f} |")
    if summary["failures"]:
        lines += ["", "Failures: " + ", ".join(f"{k} {v}" for k, v in summary["failures"].items())]
    if summary["bag_errors"]:
        lines += ["", "Bags that could not be replayed:", ""]
        lines += [f"- `{bag}`: {err}" for bag, err in summary["bag_errors"].items()]
    return "\n".join(lines) + "\n"


def plot(summary: Mapping[str, Any], path: str | Path, title: str = "replay evaluation") -> Path:
    """Two panels: accuracy per category (bars, with question counts) and latency per
    stage (median bars, p90 and max marks)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_acc, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    acc, count = summary["accuracy"], summary["count"]
    if acc:
        names = list(acc)
        bars = ax_acc.bar(range(len(names)), [acc[n] for n in names],
                          color=["tab:gray" if n == "average" else "tab:blue" for n in names])
        for bar, name in zip(bars, names):
            n = _category_count(count, name)
            note = _failure_note(summary, name, n)
            label = f"{acc[name]:.0f}% (n={n})" + ("\nno answer:\n" + note.removeprefix(
                "all failed: ").replace(", ", "\n") if note else "")
            ax_acc.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
        ax_acc.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    else:
        ax_acc.text(0.5, 0.5, "no scored questions", ha="center", va="center",
                    transform=ax_acc.transAxes)
    ax_acc.set_ylim(0, 105)
    ax_acc.set_ylabel("accuracy %")
    ax_acc.set_title("accuracy per category")
    stages = summary["latency_per_stage"]
    names = [s.removesuffix("_s") for s in stages]
    medians = [stages[s]["median"] for s in stages]
    ax_lat.bar(range(len(names)), medians, color="tab:orange", label="median")
    ax_lat.scatter(range(len(names)), [stages[s]["p90"] for s in stages], marker="_", s=400,
                   color="black", label="p90", zorder=3)
    ax_lat.scatter(range(len(names)), [stages[s]["max"] for s in stages], marker="x",
                   color="tab:red", label="max", zorder=3)
    ax_lat.set_xticks(range(len(names)), names)
    ax_lat.set_ylabel("seconds per question")
    ax_lat.set_title("latency per stage")
    # outside the axes, so it covers no marker
    ax_lat.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    head = (f"{title}: {_plural(summary['questions'], 'question')}, "
            f"{_plural(summary['bags'], 'bag')}")
    extra = [t for t in (models_line(summary.get("setup", {})), frames_line(summary)) if t]
    fig.suptitle("\n".join([head, *extra]), fontsize=10,
                 color="tab:red" if summary.get("lossy_bags") else "black")
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_reports(store: ResultStore, summary: Mapping[str, Any], title: str) -> None:
    """The summary JSON, markdown and PNG beside it (see the module docstring)."""
    from embodied_r_ros.core.append_only import write_json_atomic

    write_json_atomic(store.summary_json, summary)
    store.markdown.write_text(markdown(summary), encoding="utf-8")
    plot(summary, store.plot, title)
