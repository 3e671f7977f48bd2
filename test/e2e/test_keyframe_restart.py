"""Issue 29, item 4: a restarted key-frame node continues the running episode of the
split graph instead of starting a new one on its own, so the key frames described before
the restart still answer questions. Real DDS, the installed split graph, tiny models.
The clip is replayed losslessly (reliable camera QoS, the replay waits for the node, as
the demo replays): with sensor-data QoS a loaded machine drops most frames of a burst and
the count of key frames is chance."""

from __future__ import annotations

import pytest

from embodied_r_ros.core.settings import LOSSLESS_CAMERA, LOSSLESS_DEPTH
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.replay import SpinningClient

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import PARAMS, bag_frames, tiny_overrides, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.models, pytest.mark.slow]


def test_a_restarted_keyframe_node_continues_the_episode(tiny_models, sample_dir) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    with GraphProcesses("split", PARAMS, tiny_overrides(tiny_models, **LOSSLESS_CAMERA),
                        echo=None) as graph, \
            SpinningClient(camera_reliability="reliable") as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        clip = bag_frames(sample_dir)
        client.play(clip[: len(clip) // 2], rate=0, max_ahead=LOSSLESS_DEPTH)
        assert wait_for(lambda: sum(d.mode != "failed" for d in client.descriptions) >= 2, 180)
        episode = client.status().episode_id
        assert episode
        keyframe = graph.node("keyframe_selector")
        graph.kill("keyframe_selector")
        restarted = graph.start(keyframe.launch)
        assert wait_for(lambda: any("]: active" in line for line in restarted.lines), 120), \
            "\n".join(restarted.lines)
        before = {d.keyframe_index for d in client.descriptions if d.episode_id == episode}
        count_before = len(client.descriptions)
        assert any("continuing the running episode" in line for line in restarted.lines), \
            "\n".join(restarted.lines)
        assert client.status().episode_id == episode
        # The restarted node's camera subscription must be discovered before frames reach
        # it (best effort): offer the next frame until the node counts one.
        half = len(clip) // 2

        def counted() -> bool:
            client.play(clip[half:half + 1], rate=0)
            return client.status().frames_received > 0

        assert wait_for(counted, 60, period_s=0.5)
        client.published = client.status().frames_received  # the restarted node's count
        client.play(clip[half + 1:], rate=0, max_ahead=LOSSLESS_DEPTH)
        assert wait_for(lambda: len(client.descriptions) > count_before + 1, 180)
        new = client.descriptions[count_before:]
        assert all(d.episode_id == episode for d in new), {d.episode_id for d in new}
        fresh = {d.keyframe_index for d in new} - before
        assert fresh and min(fresh) > max(before), (sorted(before), sorted(fresh))
        reply = client.ask("Where did I start?", timeout_s=240)
        assert reply.success, reply.message
        assert reply.keyframes_used > len(fresh), reply
        graph.check_alive()
