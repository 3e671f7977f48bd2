"""Admitting and running questions: a bounded queue, one answer at a time, hard deadlines.

Rules (the robot's contract; test/unit/qa/test_question_queue.py checks each):

* Admission is immediate and bounded: at most one question is answered while up to
  `max_waiting` more wait their turn. A question beyond that bound fails at once with
  BUSY (an action goal is rejected at goal time: `admit()` is called from the goal
  callback and the ticket is handed to `run()`).
* Questions are answered one at a time, first come first served (the models and the GPU
  memory they use are never shared by two questions).
* The handler runs on the queue's answering thread; the caller waits at most until the question's
  deadline (plus `grace_s`), so a ROS service or action callback never holds an executor
  thread past its timeout, whatever the model does. A late handler is told to stop and
  keeps its place at the head of the queue until it really returns, so the next question
  never runs beside it.
* `interrupt()` ends questions at once with a typed error (an episode reset fails the
  questions bound to the old episode; deactivating a node fails all of them). Their
  handlers are told to stop.
* Every outcome is an `AnswerResult`: typed errors become failures with their code,
  anything else becomes INTERNAL; total time is always filled in.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from embodied_r_ros.core.errors import (
    BusyError,
    CancelledError,
    EmbodiedRError,
    ErrorCode,
    RequestTimeoutError,
)
from embodied_r_ros.core.qa.answerer import AnswerResult
from embodied_r_ros.core.types import TimingInfo

LOG = logging.getLogger("embodied_r_ros.questions")

# handler(deadline, timing, ticket) -> AnswerResult; it polls `ticket.should_stop()`.
Handler = Callable[[float, TimingInfo, "Ticket"], AnswerResult]


@dataclass(eq=False)
class Ticket:
    """One admitted question. `episode_id` is set by the handler once it knows which
    episode it answers from (see `QuestionQueue.interrupt`)."""

    number: int
    episode_id: str = ""
    user_stop: Callable[[], bool] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _interrupt: EmbodiedRError | None = None
    _finished: threading.Event = field(default_factory=threading.Event)
    _result: AnswerResult | None = None

    def should_stop(self) -> bool:
        """True once the question must end: interrupted, past its deadline, or cancelled
        by the caller (action cancel)."""
        if self._stop.is_set():
            return True
        return self.user_stop is not None and bool(self.user_stop())

    @property
    def interrupted(self) -> EmbodiedRError | None:
        return self._interrupt

    def check(self) -> None:
        """Raise the interrupting error, or CancelledError when the caller cancelled."""
        if self._interrupt is not None:
            raise self._interrupt
        if self.user_stop is not None and self.user_stop():
            raise CancelledError("the question was cancelled")
        if self._stop.is_set():
            raise CancelledError("the question was stopped")


class QuestionQueue:
    """Bounded FIFO of questions, answered one at a time (see the module docstring)."""

    def __init__(self, default_timeout_s: float, *, max_waiting: int = 4,
                 grace_s: float = 1.0) -> None:
        if default_timeout_s <= 0:
            raise ValueError("default_timeout_s must be > 0")
        self.default_timeout_s = float(default_timeout_s)
        self.max_waiting = max(0, int(max_waiting))
        self.grace_s = float(grace_s)
        self._cond = threading.Condition()
        self._tickets: deque[Ticket] = deque()  # head = the question being answered
        self._counter = 0
        self.rejected = 0
        # One answering thread for the queue's lifetime (questions run one at a time, so
        # one is enough; a persistent thread keeps per-thread allocations from piling up).
        self._jobs: queue.SimpleQueue[tuple[Handler, float, TimingInfo, Ticket] | None] = (
            queue.SimpleQueue())
        self._worker: threading.Thread | None = None

    def _submit(self, handler: Handler, deadline: float, timing: TimingInfo, ticket: Ticket) -> None:
        with self._cond:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._answering_loop,
                                                name="question-answering", daemon=True)
                self._worker.start()
        self._jobs.put((handler, deadline, timing, ticket))

    def _answering_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._work(*job)

    def close(self) -> None:
        """Fail what is in progress and stop the answering thread."""
        self.interrupt(CancelledError("the question queue is closing"))
        self._jobs.put(None)

    # -- admission ------------------------------------------------------------------------
    def admit(self) -> Ticket | None:
        """A ticket when there is room (1 running + max_waiting), else None (BUSY)."""
        with self._cond:
            if len(self._tickets) >= 1 + self.max_waiting:
                self.rejected += 1
                return None
            self._counter += 1
            ticket = Ticket(self._counter)
            self._tickets.append(ticket)
            return ticket

    def release(self, ticket: Ticket) -> None:
        """Give back a ticket that will not be run (e.g. a goal that was never executed)."""
        with self._cond:
            if ticket in self._tickets and not ticket._finished.is_set():
                self._tickets.remove(ticket)
                self._cond.notify_all()

    def in_progress(self) -> int:
        """Questions admitted and not finished (answered, failed or given back)."""
        with self._cond:
            return len(self._tickets)

    def busy_error(self) -> BusyError:
        return BusyError(f"{1 + self.max_waiting} questions are already being answered or "
                         "queued; retry when one is done (questions are answered one at a "
                         "time; raise qa.max_waiting_questions to queue more)")

    # -- interruption -----------------------------------------------------------------------
    def interrupt(self, error: EmbodiedRError,
                  which: Callable[[Ticket], bool] | None = None) -> int:
        """End the matching questions at once with `error`; returns how many."""
        count = 0
        with self._cond:
            for ticket in list(self._tickets):
                if ticket._finished.is_set() or ticket._interrupt is not None:
                    continue
                if which is not None and not which(ticket):
                    continue
                ticket._interrupt = error
                ticket._stop.set()
                count += 1
            self._cond.notify_all()
        return count

    # -- running ------------------------------------------------------------------------------
    def run(self, handler: Handler, *, timeout_s: float = 0.0, ticket: Ticket | None = None,
            should_stop: Callable[[], bool] | None = None, episode_id: str = "") -> AnswerResult:
        """Answer one question with `handler`; never raises, never outlives the deadline."""
        start = time.monotonic()
        limit = timeout_s if timeout_s and timeout_s > 0 else self.default_timeout_s
        deadline = start + limit
        timing = TimingInfo()
        if ticket is None:
            ticket = self.admit()
            if ticket is None:
                return self._finish(AnswerResult.failure(self.busy_error(), episode_id=episode_id,
                                                         timing=timing), start)
        ticket.user_stop = should_stop
        waited = self._wait_for_turn(ticket, deadline, limit)
        if waited is not None:
            return self._finish(AnswerResult.failure(waited, episode_id=episode_id, timing=timing),
                                start)
        self._submit(handler, deadline, timing, ticket)
        while True:
            remaining = deadline + self.grace_s - time.monotonic()
            if ticket._finished.wait(timeout=max(0.0, min(remaining, 0.05))):
                result = ticket._result
                assert result is not None
                return self._finish(result, start)
            if ticket._interrupt is not None:
                ticket._stop.set()
                error = ticket._interrupt
                return self._finish(AnswerResult.failure(
                    error, episode_id=ticket.episode_id or episode_id,
                    timing=dataclasses.replace(timing)), start)
            if remaining <= 0:
                ticket._stop.set()
                LOG.warning("question %d passed its deadline (%.1fs); answering TIMEOUT and "
                            "letting its model call stop in the background", ticket.number, limit)
                return self._finish(AnswerResult.failure(RequestTimeoutError(
                    f"no answer within the question's time limit ({limit:.1f}s); raise "
                    "timeout_s / qa.default_timeout_s, or use faster models"),
                    episode_id=ticket.episode_id or episode_id,
                    timing=dataclasses.replace(timing)), start)

    def _wait_for_turn(self, ticket: Ticket, deadline: float, limit: float) -> EmbodiedRError | None:
        with self._cond:
            while self._tickets and self._tickets[0] is not ticket:
                if ticket._interrupt is not None:
                    self._tickets.remove(ticket)
                    self._cond.notify_all()
                    return ticket._interrupt
                if ticket.user_stop is not None and ticket.user_stop():
                    self._tickets.remove(ticket)
                    self._cond.notify_all()
                    return CancelledError("the question was cancelled while it waited for "
                                          "its turn")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._tickets.remove(ticket)
                    self._cond.notify_all()
                    return RequestTimeoutError(
                        f"the question waited its whole time limit ({limit:.1f}s) for earlier "
                        "questions to finish; retry, or raise timeout_s")
                self._cond.wait(timeout=min(remaining, 0.1))
            if ticket not in self._tickets:  # given back meanwhile
                return CancelledError("the question was withdrawn")
        return None

    def _work(self, handler: Handler, deadline: float, timing: TimingInfo, ticket: Ticket) -> None:
        try:
            try:
                ticket.check()
                result = handler(deadline, timing, ticket)
            except EmbodiedRError as exc:
                result = AnswerResult.failure(exc, episode_id=ticket.episode_id, timing=timing)
            except Exception as exc:  # noqa: BLE001 - a question must never crash the node
                LOG.exception("unexpected failure while answering question %d", ticket.number)
                result = AnswerResult(success=False, error_code=ErrorCode.INTERNAL,
                                      message=f"internal error: {exc!r}; see the node log",
                                      episode_id=ticket.episode_id, timing=timing)
            if ticket._interrupt is not None:  # the interruption is the real outcome
                result = AnswerResult.failure(ticket._interrupt, episode_id=ticket.episode_id,
                                              timing=timing, messages=result.messages)
            ticket._result = result
        finally:
            with self._cond:
                ticket._finished.set()
                if ticket in self._tickets:
                    self._tickets.remove(ticket)
                self._cond.notify_all()

    @staticmethod
    def _finish(result: AnswerResult, start: float) -> AnswerResult:
        result.timing.total_s = time.monotonic() - start
        return result
