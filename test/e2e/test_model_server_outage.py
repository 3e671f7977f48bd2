"""A perception server that stops answering, and comes back, under the running embedded
graph: typed timeouts within the configured time, answers from what was described, and
recovery without restarting any node. The server is a real `transformers serve` process
with the tiny VLM; "stops answering" is SIGSTOP (the process hangs, connections stay
open), "comes back" is SIGCONT."""

from __future__ import annotations

import signal
import time

from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.replay import SpinningClient

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import PARAMS, bag_frames, wait_for
from helpers.servers import transformers_serve


def test_stalled_server_gives_typed_timeouts_then_recovers(tiny_models, sample_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    clip = bag_frames(sample_dir)
    third = len(clip) // 3
    with transformers_serve(str(tiny_models.vlm), tmp_path) as (server, base_url):
        overrides = {"perception.backend": "openai", "perception.model": str(tiny_models.vlm),
                     "perception.base_url": base_url, "perception.timeout_s": 3.0,
                     "perception.max_retries": 0, "perception.max_new_tokens": 8,
                     "perception.temperature": 0.0,
                     "reasoning.model": str(tiny_models.lm), "reasoning.device": "cpu",
                     "reasoning.max_new_tokens": 8}
        fresh_ros_domain()
        with GraphProcesses("embedded", PARAMS, overrides, echo=None) as graph, \
                SpinningClient() as client:
            client.wait_for_graph(240, alive_check=graph.check_alive)
            client.play(clip[:third], rate=4.0)
            assert wait_for(lambda: any(d.mode != "failed" for d in client.descriptions), 120)
            described_before = sum(d.mode != "failed" for d in client.descriptions)
            # The server stops answering: each key frame fails after perception.timeout_s.
            server.send_signal(signal.SIGSTOP)
            try:
                client.play(clip[third:2 * third], rate=4.0)
                start = time.monotonic()
                reply = client.ask("What did I pass?", timeout_s=120)
                elapsed = time.monotonic() - start
                failed = [d for d in client.descriptions if d.mode == "failed"]
                assert failed and all("timed out" in d.raw_text or "timeout" in d.raw_text.lower()
                                      for d in failed), [d.raw_text for d in failed]
                # Answered from the frames described before the stall (the others are
                # reported as left out), or a typed perception failure; never a hang.
                assert reply.error_code in (ErrorCode.OK, ErrorCode.UNPARSEABLE_ANSWER), reply.message
                assert "left out" in reply.message
                assert elapsed < 3.0 * (len(client.keyframes) + 2) + 30
                graph.check_alive()
            finally:
                server.send_signal(signal.SIGCONT)
            # The server is back: new key frames are described again, same node process.
            pid = graph.nodes[0].process.pid
            n_failed = sum(d.mode == "failed" for d in client.descriptions)
            client.play(clip[2 * third:], rate=4.0)
            assert wait_for(lambda: sum(d.mode != "failed" for d in client.descriptions)
                            > described_before, 120)
            reply = client.ask("Where am I now?", timeout_s=120)
            assert reply.error_code in (ErrorCode.OK, ErrorCode.UNPARSEABLE_ANSWER), reply.message
            assert graph.nodes[0].process.pid == pid and graph.nodes[0].process.poll() is None
            assert sum(d.mode == "failed" for d in client.descriptions) >= n_failed
