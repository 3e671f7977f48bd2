"""The key-frame store over real DDS with the installed executables: a node killed with
SIGKILL mid-episode and started again answers a question about a key frame seen before
the kill from its store, with that key frame (stamp, pose) in the answer's evidence; the
Recall service finds it without a model. Split graph (the reasoning node owns the store)
and embedded graph (the episode and its numbering continue)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

from embodied_r_ros.core.memory.store import STOPWORDS
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.nodes.common.conversions import stamp_to_seconds
from embodied_r_ros.replay import SpinningClient
from embodied_r_ros.sample_data.bag_io import read_odometry
from embodied_r_ros.srv import Recall

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import PARAMS, bag_frames, tiny_overrides, wait_for

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS}


def stored(db: Path) -> dict[tuple[str, int], tuple[float, float | None]]:
    """(episode, index) -> (stamp, x) read straight from the file (read-only)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT episode_id, keyframe_index, stamp_s, x FROM keyframes").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {(e, i): (s, x) for e, i, s, x in rows}


def settle(client: SpinningClient, db: Path, graph: GraphProcesses,
           timeout_s: float = 240.0) -> list[Any]:
    """Wait until every key frame so far is described, stored, and no new one comes."""
    deadline = time.monotonic() + timeout_s
    while True:
        def done() -> bool:
            s = client.status()
            described = [d for d in client.descriptions if d.mode != "failed"]
            keys = {(d.episode_id, d.keyframe_index) for d in described}
            return s.keyframes >= 4 and s.described == s.keyframes and keys <= set(stored(db))

        assert wait_for(done, max(1.0, deadline - time.monotonic())), \
            (client.status(), sorted(stored(db)), graph.output()[-4000:])
        seen = client.status().keyframes
        time.sleep(3.0)
        if client.status().keyframes == seen and done():
            return [d for d in client.descriptions if d.mode != "failed"]
        assert time.monotonic() < deadline, "key frames kept coming after the clip was played"


def pick_target(described: list[Any]) -> tuple[list[Any], str]:
    """Key frames to ask about (neither the first nor the newest) and a question made of
    words no other key frame's observation has.

    The tiny random perception model sometimes writes the very same text for two key
    frames; the store cannot tell such frames apart, so the target is then the group of
    key frames sharing that text (words found in the group and nowhere else). A single
    key frame with words of its own is preferred when there is one."""
    counts: Counter[str] = Counter()
    for d in described:
        counts.update(words(d.observation))
    ends = {described[0].keyframe_index, described[-1].keyframe_index}
    groups: dict[str, list[Any]] = {}
    for d in described:
        groups.setdefault(d.observation, []).append(d)
    candidates = []
    for text, group in groups.items():
        if ends & {d.keyframe_index for d in group}:
            continue  # the first and newest key frames are in every prompt anyway
        unique = sorted(w for w in words(text) if counts[w] == len(group))
        if unique:
            candidates.append((-len(group), len(unique), group, unique))
    assert candidates, "no key frame has a word of its own: " + repr(
        [d.observation for d in described])
    _, _, targets, unique = max(candidates, key=lambda c: c[:2])
    return targets, "Where did I see " + " ".join(unique[:6]) + "?"


def wait_active(node: Any) -> None:
    """Wait until a restarted node says it is active."""
    assert wait_for(lambda: any(line.rstrip().endswith("]: active") for line in node.lines),
                    240), "\n".join(node.lines)


def recall(client: SpinningClient, service: str, query: str) -> Recall.Response:
    cli = client.create_client(Recall, service)
    assert cli.wait_for_service(timeout_sec=60)
    future = cli.call_async(Recall.Request(query=query, k=3, thumbnails=True))
    assert wait_for(future.done, 30)
    return future.result()


def memory_overrides(tiny_models: Any, db: Path) -> dict[str, Any]:
    # A prompt of 4 key frames: the key frame asked about must be chosen from the store by
    # relevance (first + newest + 2 by relevance), not given because the episode fits.
    return tiny_overrides(tiny_models, **{
        "memory.path": str(db), "keyframes.max_keyframes": 4, "keyframes.min_keyframes": 2,
        "memory.recent_keyframes": 1, "perception.use_odometry": True,
        "perception.max_new_tokens": 16})


def check_answer(reply: Any, targets: list[Any], episode: str) -> None:
    assert reply.success, reply.message
    assert reply.episode_id == episode
    given = {e.keyframe_index: e for e in reply.evidence}
    assert len(reply.evidence) == reply.keyframes_used <= 4
    found = [t for t in targets if t.keyframe_index in given]
    assert found, ([t.keyframe_index for t in targets], sorted(given))
    target = found[0]
    evidence = given[target.keyframe_index]
    assert evidence.episode_id == episode
    assert abs(stamp_to_seconds(evidence.stamp) - stamp_to_seconds(target.header.stamp)) < 1e-6
    assert evidence.observation == target.observation
    assert evidence.has_pose and evidence.pose.header.frame_id  # odometry ran


def test_killed_reasoning_node_answers_from_its_store(tiny_models, sample_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    db = tmp_path / "robot.sqlite"
    clip = bag_frames(sample_dir)
    poses = read_odometry(sample_dir / "sample.mcap")
    half = clip[len(clip) // 2][0]
    with GraphProcesses("split", PARAMS, memory_overrides(tiny_models, db), echo=None) as graph, \
            SpinningClient() as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        client.play(clip[: len(clip) // 2], rate=2.0, poses=[p for p in poses if p.stamp_s <= half])
        described = settle(client, db, graph)
        episode = described[0].episode_id
        targets, question = pick_target(described)
        assert all(stored(db)[(episode, t.keyframe_index)][1] is not None
                   for t in targets)  # pose stored

        reasoning = graph.node("reasoning")
        graph.kill("reasoning")  # SIGKILL: no cleanup, no flush
        restarted = graph.start(reasoning.launch)
        wait_active(restarted)
        client.wait_for_graph(240, alive_check=graph.check_alive)
        # The episode goes on after the restart (the key-frame node kept it).
        client.play(clip[len(clip) // 2:], rate=2.0, poses=[p for p in poses if p.stamp_s > half])
        reply = client.ask(question, timeout_s=240)
        graph.check_alive()
        check_answer(reply, targets, episode)
        assert max(e.keyframe_index for e in reply.evidence) > described[-1].keyframe_index
        assert reply.has_goal_pose or not any(e.named for e in reply.evidence)

        found = recall(client, "recall", question)
        assert found.success, found.message
        hits = {r.keyframe_index: r for r in found.results}
        assert any(t.keyframe_index in hits and hits[t.keyframe_index].has_pose for t in targets), \
            ([t.keyframe_index for t in targets], sorted(hits))
        assert len(found.thumbnail_images) == len(found.results)
        assert any(len(t.data) > 100 for t in found.thumbnail_images), "no thumbnail stored"
        assert restarted.process.poll() is None


def test_killed_embedded_node_continues_its_episode(tiny_models, sample_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    db = tmp_path / "robot.sqlite"
    clip = bag_frames(sample_dir)
    poses = read_odometry(sample_dir / "sample.mcap")
    half = clip[len(clip) // 2][0]
    with GraphProcesses("embedded", PARAMS, memory_overrides(tiny_models, db),
                        echo=None) as graph, SpinningClient() as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        client.play(clip[: len(clip) // 2], rate=2.0, poses=[p for p in poses if p.stamp_s <= half])
        described = settle(client, db, graph)
        episode = described[0].episode_id
        before = client.status().keyframes
        targets, question = pick_target(described)

        node = graph.node("embodied_r")
        graph.kill("embodied_r")
        restarted = graph.start(node.launch)
        wait_active(restarted)
        client.wait_for_graph(240, alive_check=graph.check_alive)
        status = client.status()
        assert status.episode_id == episode  # the stored episode continues
        assert status.keyframes == before  # and its numbering
        client.play(clip[len(clip) // 2:], rate=2.0, poses=[p for p in poses if p.stamp_s > half])
        assert wait_for(lambda: client.status().keyframes > before, 120)
        reply = client.ask(question, timeout_s=240)
        graph.check_alive()
        check_answer(reply, targets, episode)
        newest = max(e.keyframe_index for e in reply.evidence)
        assert newest >= before  # a key frame seen after the restart, numbered on
