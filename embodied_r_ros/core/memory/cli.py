"""`embodied-r memory ...`: the key-frame store from the command line (docs/memory.md).

    embodied-r memory import FILE.jsonl --db DB
    embodied-r memory search DB TEXT [--k K] [--episode ID] [--thumbnails] --json
    embodied-r memory select DB --question TEXT [--max 32] [--mode relevant|even]
                                [--episode ID] [--now STAMP] --json
    embodied-r memory export DB --episode ID [--out FILE.jsonl] [--html FILE.html]
    embodied-r memory stats DB [--json]

An import line is one JSON object: episode_id, keyframe_index, stamp_s, observation,
action (optional), action_source (optional), raw_text (optional), pose (optional:
{x, y, z, yaw, frame_id}). Export writes the same format (plus has_thumbnail), so an
export can be imported into another robot's store.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import sys
import time
from pathlib import Path
from typing import Any

from embodied_r_ros.core.errors import MemoryStoreError
from embodied_r_ros.core.memory.selection import MODES, select_keyframes
from embodied_r_ros.core.memory.store import KeyFrameRecord, MemoryStore
from embodied_r_ros.core.memory.time_hints import format_age


def _open(path: str, *, must_exist: bool = True) -> MemoryStore:
    if must_exist and not Path(path).is_file():
        raise MemoryStoreError(f"no memory store at {path}; give the file the node writes "
                               "(memory.path, default $ROS_HOME/embodied_r/<namespace>.sqlite)",
                               path=path)
    return MemoryStore(path, background=False)


def _episode(store: MemoryStore, given: str | None) -> str:
    if given:
        return given
    if store.current_episode_id:
        return store.current_episode_id
    episodes = store.episodes()
    if not episodes:
        raise MemoryStoreError(f"the store {store.path} holds no key frames", path=store.path)
    return str(episodes[-1]["episode_id"])


def _pose(record: KeyFrameRecord) -> dict[str, Any] | None:
    return None if record.pose is None else vars(record.pose).copy()


def cmd_import(args: argparse.Namespace) -> int:
    store = _open(args.db, must_exist=False)
    bad: list[str] = []
    records: list[KeyFrameRecord] = []
    with open(args.file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                records.append(KeyFrameRecord.from_json(json.loads(line)))
            except (ValueError, TypeError, AttributeError) as exc:
                bad.append(f"{args.file}:{number}: {exc}")
    written = store.write_many(records)
    store.close()
    for message in bad:
        print(message, file=sys.stderr)
    print(f"imported {written} key frame(s) into {args.db}"
          + (f"; {len(bad)} line(s) skipped (see above)" if bad else ""))
    return 1 if bad else 0


def cmd_search(args: argparse.Namespace) -> int:
    store = _open(args.db)
    start = time.perf_counter()
    hits = store.search(args.text, args.k, episode_id=args.episode)
    out = []
    for episode, index, score in hits:
        record = store.get(episode, [index])[0]
        item = {"episode_id": episode, "keyframe_index": index, "score": round(score, 4),
                "stamp_s": record.stamp_s, "pose": _pose(record),
                "observation": record.observation, "has_thumbnail": record.thumbnail is not None}
        if args.thumbnails and record.thumbnail is not None:
            item["thumbnail_jpeg_b64"] = base64.b64encode(record.thumbnail).decode()
        out.append(item)
    elapsed_ms = (time.perf_counter() - start) * 1000
    store.close()
    if args.json:
        print(json.dumps({"query": args.text, "results": out, "ms": round(elapsed_ms, 2)}))
    else:
        for item in out:
            print(f"{item['episode_id']} #{item['keyframe_index']} t={item['stamp_s']:.1f} "
                  f"score={item['score']}: {item['observation']}")
        if not out:
            print("no key frame matches")
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    store = _open(args.db)
    episode = _episode(store, args.episode)
    start = time.perf_counter()
    sel = select_keyframes(store, episode, args.question, max_keyframes=args.max,
                           mode=args.mode, now_s=args.now, recent=args.recent,
                           exact_total=True)
    elapsed_ms = (time.perf_counter() - start) * 1000
    store.close()
    frames = [{"position": pos, "keyframe_index": r.keyframe_index, "stamp_s": r.stamp_s,
               "age": format_age(sel.now_s - r.stamp_s),
               "reason": sel.reasons.get(r.keyframe_index, ""), "pose": _pose(r),
               "observation": r.observation} for pos, r in enumerate(sel.records)]
    if args.json:
        print(json.dumps({"episode_id": episode, "mode": sel.mode, "total": sel.total,
                          "now_s": sel.now_s, "ms": round(elapsed_ms, 2), "keyframes": frames}))
    else:
        print(f"episode {episode}: {len(frames)} of {sel.total} key frame(s) ({sel.mode})")
        for f in frames:
            print(f"Frame {f['position']}, {f['age']} ago (#{f['keyframe_index']}, "
                  f"{f['reason']}): {f['observation']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = _open(args.db)
    episode = _episode(store, args.episode)
    records = store.records(episode)
    questions = store.questions(episode)
    store.close()
    lines = [json.dumps(r.to_json()) for r in records]
    if args.out:
        Path(args.out).write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    else:
        for line in lines:
            print(line)
    if args.html:
        Path(args.html).write_text(render_html(episode, records, questions), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


def render_html(episode: str, records: list[KeyFrameRecord], questions: list[Any]) -> str:
    """A self-contained page: each key frame's thumbnail with its description, stamp and
    pose, then the questions asked with their answers and evidence."""
    esc = html.escape
    end = records[-1].stamp_s if records else 0.0
    rows = []
    for r in records:
        img = (f'<img alt="key frame {r.keyframe_index}" src="data:image/jpeg;base64,'
               f'{base64.b64encode(r.thumbnail).decode()}">' if r.thumbnail else
               '<div class="noimg">no thumbnail</div>')
        pose = ("" if r.pose is None else
                f"x={r.pose.x:.2f} y={r.pose.y:.2f} yaw={r.pose.yaw:.2f} ({esc(r.pose.frame_id)})")
        rows.append(
            f'<div class="kf" id="kf-{r.keyframe_index}" data-index="{r.keyframe_index}">{img}'
            f'<div class="meta"><b>Key frame {r.keyframe_index}</b> · t={r.stamp_s:.2f} s · '
            f'{format_age(end - r.stamp_s)} before the last<br><span class="pose">{pose}</span>'
            f'<br><i>{esc(r.action or "")}</i><p class="obs">{esc(r.observation)}</p></div></div>')
    qrows = []
    for q in questions:
        refs = ", ".join(f'<a href="#kf-{e["keyframe_index"]}">{e["keyframe_index"]}</a>'
                         + ("*" if e.get("named") else "") for e in q.evidence)
        qrows.append(f'<tr class="question"><td>{esc(q.question)}</td>'
                     f'<td>{esc(", ".join(q.choices))}</td><td>{esc(q.answer)}</td>'
                     f'<td>{refs}</td></tr>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Episode {esc(episode)}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; background: #fafafa; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 10px; }}
.kf {{ background: white; border: 1px solid #ddd; border-radius: 6px; padding: 6px; }}
.kf img {{ max-width: 100%; display: block; }}
.noimg {{ height: 60px; background: #eee; color: #888; text-align: center; line-height: 60px; }}
.meta {{ font-size: 13px; }} .pose {{ color: #555; }}
table {{ border-collapse: collapse; margin-top: 1em; }} td, th {{ border: 1px solid #ccc; padding: 4px; }}
</style></head><body>
<h1>Episode {esc(episode)}</h1>
<p>{len(records)} key frame(s), {len(questions)} question(s). * = named by the reasoning.</p>
<div class="grid">
{chr(10).join(rows)}
</div>
<h2>Questions</h2>
<table><tr><th>Question</th><th>Choices</th><th>Answer</th><th>Evidence (key frames)</th></tr>
{chr(10).join(qrows)}
</table></body></html>
"""


def cmd_stats(args: argparse.Namespace) -> int:
    store = _open(args.db)
    stats = store.stats()
    store.close()
    if args.json:
        print(json.dumps(stats))
        return 0
    print(f"{stats['path']}: schema {stats['schema_version']}, "
          f"{stats['file_bytes'] / 1e6:.1f} MB, {stats['keyframes']} key frame(s) "
          f"({stats['with_pose']} with pose, {stats['with_thumbnail']} with thumbnail, "
          f"{stats['thumbnail_bytes'] / 1e6:.1f} MB of thumbnails), "
          f"{stats['questions']} question(s)")
    for e in stats["episodes"]:
        span = ((e["last_stamp_s"] or 0) - (e["first_stamp_s"] or 0)) / 60
        print(f"  episode {e['episode_id']}{' (current)' if e['current'] else ''}: "
              f"{e['keyframes']} key frame(s) over {span:.1f} min")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="embodied-r memory",
                                description="Read and fill the robot's key-frame store.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("import", help="add key frames from a JSONL file")
    s.add_argument("file")
    s.add_argument("--db", required=True, help="store file (created when missing)")
    s.set_defaults(run=cmd_import)
    s = sub.add_parser("search", help="key frames matching a text (no model)")
    s.add_argument("db")
    s.add_argument("text")
    s.add_argument("--k", type=int, default=5)
    s.add_argument("--episode", default=None, help="only this episode (default: all)")
    s.add_argument("--thumbnails", action="store_true", help="include JPEG thumbnails (base64)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(run=cmd_search)
    s = sub.add_parser("select", help="the key frames a question would be given, in order")
    s.add_argument("db")
    s.add_argument("--question", required=True)
    s.add_argument("--max", type=int, default=32)
    s.add_argument("--mode", choices=MODES, default="relevant")
    s.add_argument("--recent", type=int, default=4)
    s.add_argument("--episode", default=None, help="default: the current episode")
    s.add_argument("--now", type=float, default=None,
                   help="stamp of 'now' (default: the newest key frame's stamp)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(run=cmd_select)
    s = sub.add_parser("export", help="one episode as JSONL (and an HTML page)")
    s.add_argument("db")
    s.add_argument("--episode", default=None, help="default: the current episode")
    s.add_argument("--out", default=None, help="JSONL file (default: stdout)")
    s.add_argument("--html", default=None, help="also write an HTML page with thumbnails")
    s.set_defaults(run=cmd_export)
    s = sub.add_parser("stats", help="size and contents of a store")
    s.add_argument("db")
    s.add_argument("--json", action="store_true")
    s.set_defaults(run=cmd_stats)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except MemoryStoreError as exc:
        print(f"embodied-r memory: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"embodied-r memory: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
