"""Background perception: describes key frames in arrival order while the robot moves.

The first key frame of an episode is described alone; every later one as a pair with
the previous key frame. Descriptions are parsed into action + observation and appended
to the episode memory. One worker thread, a bounded queue, and a way to wait until a
given key frame is described (used when a question arrives).

When several key frames wait, up to `batch_size` of them are described in one batched
backend call (`Perceiver.describe_batch`): a GPU decodes a batch of 4-8 requests in about
the time of one, so perception keeps up with a moving robot instead of dropping frames.
Each key frame of a batch is still paired with its own predecessor (the key frame before
it in the batch, or the last one described), and results are recorded in order, so the
text is what the one-at-a-time path gives (greedy decoding; test/unit/perception).

Retry policy (docs/reliability.md): a key frame whose description failed (the model or
its server raised: down, timing out, erroring) is recorded as failed at once, so no
question waits for it, and kept for a retry. New key frames always go first; retries run
when no new key frame waits, newest first, each after a backoff (RETRY_BACKOFF_S, capped)
that restarts at zero as soon as any description succeeds again (the backend is back).
At most `max_queue` key frames wait for a retry (the oldest is given up beyond that) and
each is tried MAX_RETRY_ATTEMPTS times. A retried description is recorded like any other
(memory, progress, `on_description`); the counts are in the health item.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.backends.base import Perceiver, PerceptionRequest
from embodied_r_ros.core.errors import PerceptionError
from embodied_r_ros.core.health import (
    EventWindow,
    HealthItem,
    LatencyStats,
    perception_item,
)
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.perception.parser import parse_frame_description
from embodied_r_ros.core.perception.progress import ProcessedFrames
from embodied_r_ros.core.prompts.perception import first_frame_prompt, pair_prompt
from embodied_r_ros.core.prompts.prompt_set import PromptSet
from embodied_r_ros.core.settings import DiagnosticsSettings
from embodied_r_ros.core.types import FrameDescription, GenerationSettings

LOG = logging.getLogger("embodied_r_ros.perception")

# Given (previous stamp, current stamp), return an action label measured from odometry,
# or None when no measurement is available.
MotionSource = Callable[[float, float], "str | None"]


@dataclass(frozen=True)
class PerceptionJob:
    episode_id: str
    keyframe_index: int
    image: np.ndarray
    stamp_s: float
    skip: bool = False  # already described: only becomes the next pair's previous frame


# Backoff before the n-th retry of a key frame (the last value repeats).
RETRY_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0)
MAX_RETRY_ATTEMPTS = 8


@dataclass
class _Retry:
    job: PerceptionJob
    previous: tuple[np.ndarray, float] | None
    attempts: int  # failed attempts so far (the first description included)
    due: float  # monotonic time of the next attempt


def keyframe_request(image: np.ndarray, previous: np.ndarray | None,
                     question: str | None = None,
                     prompts: PromptSet | None = None) -> PerceptionRequest:
    """Images and prompt for one key frame: alone (frame 0) or after its predecessor."""
    if previous is None:
        return [image], first_frame_prompt(question, prompts)
    return [previous, image], pair_prompt(question, prompts)


def parsed_description(text: str, *, first: bool, keyframe_index: int, question: str | None,
                       latency_s: float, stamp_s: float) -> FrameDescription:
    """The perception model's text for one key frame, parsed into a FrameDescription."""
    parsed = parse_frame_description(text, first=first)
    return FrameDescription(
        keyframe_index=keyframe_index,
        observation=parsed.observation,
        action=parsed.action,
        raw_text=parsed.raw_text,
        action_source="vlm" if parsed.action else "",
        mode="on_query" if question else "streaming",
        latency_s=latency_s,
        stamp_s=stamp_s,
    )


def describe_keyframe(perceiver: Perceiver, image: np.ndarray, previous: np.ndarray | None,
                      keyframe_index: int, settings: GenerationSettings | None = None,
                      question: str | None = None, stamp_s: float = 0.0,
                      prompts: PromptSet | None = None) -> FrameDescription:
    """One perception call for one key frame (alone, or paired with the previous one)."""
    start = time.monotonic()
    images, prompt = keyframe_request(image, previous, question, prompts)
    text = perceiver.describe(images, prompt, settings)
    return parsed_description(text, first=previous is None, keyframe_index=keyframe_index,
                              question=question, latency_s=time.monotonic() - start,
                              stamp_s=stamp_s)


class PerceptionWorker:
    """Describes queued key frames on a worker thread, in order, and records the results.

    Results go to `memory` (when given) and to `on_description`, which also receives
    failures (mode "failed", the error in raw_text); failures are not stored in memory.
    Every description carries the episode id of the key frame it describes.

    Queue policy (bounded memory, never blocking the caller): at most `max_queue` key
    frames wait. When a new one arrives at a full queue, the OLDEST waiting key frame is
    dropped: it is recorded as failed ("dropped: perception queue full"), counted in
    `dropped`, and the next key frame is described as a pair with the last one that was
    described. The newest view is what a question needs most; a question reports the key
    frames that were left out. A reset drops every queued key frame of the old episode at
    once (their images are freed).

    Batching: with `batch_size` > 1 the worker takes up to that many waiting key frames
    at once (never across a skipped one) and describes them with one `describe_batch`
    call; key frame k of the batch is paired with key frame k-1 of the batch. Key frames
    being described are no longer in the queue, so they are never dropped; what waits
    behind them is subject to the policy above. When a batched call fails, its key frames
    are described again one at a time, so a failure costs exactly the frames the
    one-at-a-time path would lose. `batches` and `batched_frames` count the calls.
    """

    def __init__(self, perceiver: Perceiver, memory: EpisodeMemory | None = None, *,
                 settings: GenerationSettings | None = None,
                 motion_source: MotionSource | None = None,
                 on_description: Callable[[FrameDescription], None] | None = None,
                 max_queue: int = 64, episode_id: str | None = None,
                 prompts: PromptSet | None = None, batch_size: int = 1,
                 persist: Callable[[FrameDescription], None] | None = None) -> None:
        self.perceiver = perceiver
        # Called with each description before its key frame counts as done (the
        # long-horizon store), so a question that waits for it finds it stored.
        self.persist = persist
        self.prompts = prompts
        self.memory = memory
        self.settings = settings
        self.motion_source = motion_source
        self.on_description = on_description
        self.max_queue = max(1, int(max_queue))
        self.batch_size = max(1, int(batch_size))
        self._jobs: deque[PerceptionJob] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = 0  # key frames being described
        self.progress = ProcessedFrames()
        self._previous: tuple[np.ndarray, float] | None = None
        self._episode_id = episode_id if episode_id is not None else (
            memory.episode_id if memory is not None else "")
        self.dropped = 0
        self.described = 0
        self.failed = 0
        self.batches = 0  # describe calls made (one per batch)
        self.batched_frames = 0  # key frames those calls described or attempted
        self.latency = LatencyStats()
        self.outcomes: deque[bool] = deque(maxlen=32)  # recent: True described, False failed
        self.dropped_window = EventWindow(10.0)
        self.last_error = ""
        self._retries: list[_Retry] = []
        self.retried = 0  # key frames described by a retry
        self.retry_attempts = 0  # retries made (successful or not)
        self.gave_up = 0  # key frames no longer retried (attempts spent, or too many waiting)
        self.failure_streak = 0  # descriptions failed in a row (0 after any success)
        self._thread = threading.Thread(target=self._run, name="perception", daemon=True)
        self._thread.start()

    # -- input --------------------------------------------------------------------------------
    def submit(self, job: PerceptionJob) -> None:
        """Queue a key frame (never blocks; see the queue policy in the class docstring)."""
        dropped: PerceptionJob | None = None
        with self._cond:
            if job.episode_id != self._episode_id:
                LOG.debug("ignoring key frame %d of episode %s (current %s)",
                          job.keyframe_index, job.episode_id, self._episode_id)
                return
            if len(self._jobs) >= self.max_queue:
                dropped = self._jobs.popleft()
                self.dropped += 1
                self.dropped_window.add()
            self._jobs.append(job)
            self._cond.notify_all()
        if dropped is not None:
            reason = (f"dropped: perception queue full ({self.max_queue} key frames waiting; "
                      "the perception model is slower than the key-frame rate)")
            LOG.warning("key frame %d %s", dropped.keyframe_index, reason)
            self._record(dropped, FrameDescription(
                keyframe_index=dropped.keyframe_index, observation="", raw_text=reason,
                mode="failed", stamp_s=dropped.stamp_s, episode_id=dropped.episode_id))

    def skip(self, job: PerceptionJob) -> None:
        """A key frame described earlier (e.g. by a previous run of this node): not
        described again, but the next key frame is paired with it."""
        with self._cond:
            if job.episode_id != self._episode_id:
                return
            self._jobs.append(dataclasses.replace(job, skip=True))
            self._cond.notify_all()

    def reset(self, episode_id: str) -> None:
        """Start episode `episode_id`: queued key frames of the old one are dropped."""
        with self._cond:
            self._episode_id = episode_id
            self._jobs.clear()
            self._retries.clear()
            self._previous = None
            self.progress.reset()
            if self.memory is not None:
                self.memory.clear(episode_id)
            self._cond.notify_all()

    @property
    def episode_id(self) -> str:
        with self._cond:
            return self._episode_id

    # -- waiting --------------------------------------------------------------------------------
    def wait_for(self, keyframe_index: int, timeout_s: float,
                 should_stop: Callable[[], bool] | None = None) -> bool:
        """Wait until key frame `keyframe_index` is processed (described or failed)."""
        return self.progress.wait_for(keyframe_index, timeout_s, should_stop)

    @property
    def failures(self) -> dict[int, str]:
        return self.progress.failures

    def pending(self) -> int:
        """Key frames queued or being described."""
        with self._cond:
            return len(self._jobs) + self._busy

    def retry_waiting(self) -> int:
        with self._cond:
            return len(self._retries)

    def failing(self, threshold: int) -> str:
        """The last error while at least `threshold` descriptions failed in a row (the
        model or its server is down), else "". Status, /diagnostics and questions use it."""
        with self._cond:
            if self.failure_streak >= max(1, threshold) and self.last_error:
                return self.last_error
            return ""

    def health(self, node: str, model: str, ready: bool,
               thresholds: DiagnosticsSettings) -> HealthItem:
        item = perception_item(node, model=model, ready=ready, pending=self.pending(),
                               max_queue=self.max_queue, described=self.described,
                               failed=self.failed, dropped=self.dropped,
                               dropped_recent=self.dropped_window.count(),
                               recent_outcomes=list(self.outcomes), latency=self.latency,
                               last_error=self.last_error, thresholds=thresholds)
        with self._cond:
            calls, frames = self.batches, self.batched_frames
        item.values["batch size (max / mean)"] = (
            f"{self.batch_size} / {frames / calls:.2f}" if calls else f"{self.batch_size} / -")
        item.values.update({"retry waiting": str(self.retry_waiting()),
                            "described by retry": str(self.retried),
                            "retries made": str(self.retry_attempts),
                            "given up": str(self.gave_up)})
        return item

    def check_alive(self) -> None:
        """Raise PerceptionError when the worker thread is no longer running."""
        if not self._thread.is_alive():
            raise PerceptionError("the perception worker has stopped; restart the node")

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._jobs.clear()
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)

    # -- worker -------------------------------------------------------------------------------------
    def _next(self) -> tuple[list[PerceptionJob], tuple[np.ndarray, float] | None,
                             _Retry | None] | None:
        """New key frames first (one skipped key frame, or up to `batch_size` to
        describe); else the newest retry that is due; else wait."""
        with self._cond:
            while not self._stopping:
                if self._jobs:
                    batch = [self._jobs.popleft()]
                    if not batch[0].skip:
                        while (self._jobs and len(batch) < self.batch_size
                               and not self._jobs[0].skip):
                            batch.append(self._jobs.popleft())
                    self._busy = len(batch)
                    return batch, self._previous, None
                if not self._retries:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                due = [r for r in self._retries if r.due <= now]
                if due:
                    retry = max(due, key=lambda r: r.job.keyframe_index)
                    self._retries.remove(retry)
                    self._busy = 1
                    return [retry.job], retry.previous, retry
                self._cond.wait(timeout=min(r.due for r in self._retries) - now)
            return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            batch, previous, retry = item
            try:
                if batch[0].skip:
                    job = batch[0]
                    with self._cond:
                        if job.episode_id == self._episode_id:
                            self._previous = (job.image, job.stamp_s)
                            self.progress.mark_done(job.keyframe_index)
                    continue
                if retry is not None:
                    self._retry(retry)
                elif len(batch) == 1:
                    self._count_call(1)
                    self._record_new(batch[0], previous,
                                     self._describe(batch[0], previous))
                else:
                    self._describe_many(batch, previous)
            finally:
                with self._cond:
                    self._busy = 0

    def _count_call(self, n: int) -> None:
        with self._cond:
            self.batches += 1
            self.batched_frames += n

    def _describe_many(self, batch: list[PerceptionJob],
                       previous: tuple[np.ndarray, float] | None) -> None:
        """Describe several key frames in one call; each paired with its predecessor."""
        pairs: list[tuple[PerceptionJob, tuple[np.ndarray, float] | None]] = []
        for job in batch:
            pairs.append((job, previous))
            previous = (job.image, job.stamp_s)
        self._count_call(len(batch))
        descriptions = self._describe_pairs(pairs)
        if descriptions is None:
            self._describe_one_by_one(batch)
            return
        for (job, prev), description in zip(pairs, descriptions, strict=True):
            self._record_new(job, prev, description)

    def _describe_one_by_one(self, batch: list[PerceptionJob]) -> None:
        """The one-at-a-time path for a batch whose batched call failed: each key frame
        is paired with the last one described (a failed one is not a predecessor)."""
        for job in batch:
            with self._cond:
                if self._stopping:
                    return
                previous = self._previous
            self._count_call(1)
            self._record_new(job, previous, self._describe(job, previous))

    def _record_new(self, job: PerceptionJob, previous: tuple[np.ndarray, float] | None,
                    description: FrameDescription) -> None:
        """Record a first attempt; a failed one is kept for a retry."""
        self._record(job, description)
        if description.mode == "failed":
            self._schedule_retry(_Retry(job, previous, 1, 0.0))

    def _retry(self, retry: _Retry) -> None:
        with self._cond:
            self.retry_attempts += 1
        description = self._describe(retry.job, retry.previous, quiet=True)
        if description.mode == "failed":
            retry.attempts += 1
            self._note_outcome(False, description.raw_text)
            self._schedule_retry(retry)
        else:
            self._record(retry.job, description, retried=True)

    def _describe_pairs(self, pairs: list[tuple[PerceptionJob, tuple[np.ndarray, float] | None]],
                        quiet: bool = False) -> list[FrameDescription] | None:
        """One backend call for (key frame, predecessor) pairs. A failure of a single
        pair becomes a failed description; a failure of several returns None, so that
        the caller retries them one at a time."""
        start = time.monotonic()
        try:
            requests = [keyframe_request(job.image, prev[0] if prev else None,
                                         prompts=self.prompts) for job, prev in pairs]
            if len(requests) == 1:
                texts = [self.perceiver.describe(*requests[0], self.settings)]
            else:
                texts = list(self.perceiver.describe_batch(requests, self.settings))
                if len(texts) != len(requests):
                    raise PerceptionError(f"describe_batch returned {len(texts)} texts for "
                                          f"{len(requests)} requests")
            elapsed = time.monotonic() - start
            descriptions = []
            for (job, prev), text in zip(pairs, texts, strict=True):
                description = parsed_description(
                    text, first=prev is None, keyframe_index=job.keyframe_index,
                    question=None, latency_s=elapsed, stamp_s=job.stamp_s)
                if prev is not None and self.motion_source is not None:
                    measured = self.motion_source(prev[1], job.stamp_s)
                    if measured:
                        description.action = measured
                        description.action_source = "odometry"
                description.episode_id = job.episode_id
                descriptions.append(description)
            return descriptions
        except Exception as exc:  # noqa: BLE001 - any backend failure is recorded
            if len(pairs) > 1:
                LOG.warning("batched perception of %d key frames failed (%s); describing "
                            "them one at a time", len(pairs), exc)
                return None
            job = pairs[0][0]
            (LOG.debug if quiet else LOG.error)(
                "key frame %d could not be described: %s. It is retried when the model "
                "answers again; answers meanwhile use the other key frames. Check the "
                "perception model/server.", job.keyframe_index, exc)
            return [FrameDescription(keyframe_index=job.keyframe_index, observation="",
                                     raw_text=str(exc), mode="failed", stamp_s=job.stamp_s,
                                     episode_id=job.episode_id)]

    def _describe(self, job: PerceptionJob, previous: tuple[np.ndarray, float] | None,
                  quiet: bool = False) -> FrameDescription:
        descriptions = self._describe_pairs([(job, previous)], quiet)
        assert descriptions is not None  # one pair: a failure is a failed description
        return descriptions[0]

    def _schedule_retry(self, retry: _Retry) -> None:
        given_up: _Retry | None = None
        with self._cond:
            if retry.job.episode_id != self._episode_id:
                return
            if retry.attempts >= MAX_RETRY_ATTEMPTS:
                given_up = retry
            else:
                backoff = RETRY_BACKOFF_S[min(retry.attempts - 1, len(RETRY_BACKOFF_S) - 1)]
                retry.due = time.monotonic() + backoff
                self._retries.append(retry)
                if len(self._retries) > self.max_queue:
                    given_up = min(self._retries, key=lambda r: r.job.keyframe_index)
                    self._retries.remove(given_up)
            if given_up is not None:
                self.gave_up += 1
            self._cond.notify_all()
        if given_up is not None:
            LOG.warning("key frame %d stays undescribed: %d attempt(s) failed or too many "
                        "key frames wait for a retry; last error: %s",
                        given_up.job.keyframe_index, given_up.attempts, self.last_error)

    def _note_outcome(self, ok: bool, error: str = "") -> None:
        with self._cond:
            if ok:
                self.failure_streak = 0
                now = time.monotonic()
                for retry in self._retries:  # the backend answers again: retry now
                    retry.due = min(retry.due, now)
                self._cond.notify_all()
            else:
                self.failure_streak += 1
                self.last_error = error

    def _record(self, job: PerceptionJob, description: FrameDescription,
                retried: bool = False) -> None:
        if not description.raw_text.startswith("dropped:"):
            self._note_outcome(description.mode != "failed", description.raw_text)
        if self.persist is not None and description.mode != "failed":
            try:
                self.persist(description)
            except Exception:  # noqa: BLE001 - the store never stops perception
                LOG.exception("storing the description of key frame %d failed",
                              job.keyframe_index)
        with self._cond:
            if job.episode_id != self._episode_id:
                return  # described for an episode that was reset meanwhile
            if description.mode == "failed":
                self.failed += 1
                self.outcomes.append(False)
                self.last_error = description.raw_text
                self.progress.mark_failed(job.keyframe_index, description.raw_text)
            else:
                if retried:
                    self.retried += 1
                    LOG.info("key frame %d described on retry", job.keyframe_index)
                else:  # a retried (older) key frame never becomes the next pair's partner
                    self._previous = (job.image, job.stamp_s)
                self.described += 1
                self.outcomes.append(True)
                self.latency.add(description.latency_s)
                self.progress.mark_done(job.keyframe_index)
                if self.memory is not None:
                    self.memory.put(description)
                    if self.memory.evicted_below > 1:
                        self.progress.forget_below(self.memory.evicted_below)
        if self.on_description is not None:
            try:
                self.on_description(description)
            except Exception:  # noqa: BLE001
                LOG.exception("description callback failed")
