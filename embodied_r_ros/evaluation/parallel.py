"""Fast replay of many bags on several processes (`replay-eval --mode fast --jobs N`).

Each of the N worker processes loads the models once and replays whole bags through its
own `FastReplay` (its own pipeline, one episode per bag), so the key-frame stage
(decoding, ORB matching, homographies) and everything else per bag runs on N cores.
Every answer is sent to this process as soon as it exists and appended to the results
file here, so a killed run loses no finished question; a bag's episode record is written
when the bag is done. Bags are independent episodes, so the answers are those of
`--jobs 1`.

Model memory: N copies of in-process models. With the `openai` backend (a vLLM or other
OpenAI-compatible server) the models live on the server once and the N processes send it
concurrent requests, which the server batches. Processes are started with "spawn" (the
parent may hold threads or CUDA state a forked child must not inherit), and each sets
torch's thread count to its share of the cores.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue as queue_module
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from embodied_r_ros.core.errors import BagError
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.core.shards import available_cores
from embodied_r_ros.evaluation.questions import QuestionItem
from embodied_r_ros.evaluation.results import QuestionResult

LOG = logging.getLogger("embodied_r_ros.evaluation.parallel")

_REPLAY: Any = None
_RESULTS: Any = None


def _init_worker(settings: Settings, results: Any, threads: int) -> None:
    global _REPLAY, _RESULTS
    try:
        import torch

        torch.set_num_threads(max(1, threads))
    except ImportError:  # pragma: no cover - models that need no torch (openai backend)
        pass
    from embodied_r_ros.evaluation.fast import FastReplay

    _REPLAY = FastReplay(settings)
    _RESULTS = results


def _replay_bag(key: str, path: str, items: list[QuestionItem], options: dict[str, Any]
                ) -> dict[str, Any]:
    record = _REPLAY.run_bag(key, Path(path), items,
                             on_result=lambda r: _RESULTS.put(r.to_json()), **options)
    return record.to_json()


def run_parallel(settings: Settings, bags: Mapping[str, Path],
                 todo: Mapping[str, Sequence[QuestionItem]], jobs: int, options: dict[str, Any],
                 *, on_result: Callable[[QuestionResult], None],
                 on_episode: Callable[[dict[str, Any]], None],
                 on_bag_error: Callable[[str, Exception], None]) -> None:
    """Replay `todo` (bag key -> questions) on `jobs` processes; callbacks run here."""
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    results = manager.Queue()
    done = threading.Event()

    def drain() -> None:
        while not (done.is_set() and results.empty()):
            try:
                row = results.get(timeout=0.1)
            except queue_module.Empty:
                continue
            on_result(QuestionResult.from_json(row))

    consumer = threading.Thread(target=drain, daemon=True)
    consumer.start()
    cores = available_cores()
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                 initargs=(settings, results, cores // jobs)) as pool:
            futures = {pool.submit(_replay_bag, key, str(bags[key]), list(items), options): key
                       for key, items in todo.items()}
            for future in as_completed(futures):
                key = futures[future]
                try:
                    record = future.result()
                except BagError as exc:
                    on_bag_error(key, exc)
                    continue
                on_episode(record)
    finally:
        done.set()
        consumer.join()
        manager.shutdown()
