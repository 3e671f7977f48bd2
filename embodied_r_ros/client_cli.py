"""`embodied-r ask | reset | status`: query a running graph without the ros2 CLI.

    embodied-r ask "Is the door to my left or right?" --choice left --choice right
    embodied-r ask "How do I get back to the red car?" --stream      # action, live text
    embodied-r reset
    embodied-r status [--json]

Options common to all: --namespace NS (the graph's namespace), --wait S (seconds to wait
for the graph, default 10). Exit codes: 0 answered / done, 1 the graph answered with a
failure (error code and message printed), 2 bad arguments, 3 no graph reachable.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"embodied-r {command}")
    parser.add_argument("--namespace", default="", help="namespace of the graph's nodes")
    parser.add_argument("--wait", type=float, default=10.0,
                        help="seconds to wait for the graph to be reachable (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    if command == "ask":
        parser.add_argument("question", help="the question, in plain words")
        parser.add_argument("--choice", action="append", default=[],
                            help="an answer option (repeat; lettered A, B, ... in order)")
        parser.add_argument("--timeout", type=float, default=0.0,
                            help="seconds the node may take (0 = its qa.default_timeout_s)")
        parser.add_argument("--stream", action="store_true",
                            help="use the AnswerSpatial action: print stages and text live")
    return parser


def _fields(msg: Any) -> dict[str, Any]:
    """A ROS message as plain JSON-able data (nested messages and arrays of them too)."""
    return {name: _plain(getattr(msg, name)) for name in msg.get_fields_and_field_types()}


def _plain(value: Any) -> Any:
    if hasattr(value, "get_fields_and_field_types"):
        return _fields(value)
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("array", "ndarray"):
        return [_plain(item) for item in value]
    if hasattr(value, "item"):  # numpy scalars of numeric arrays
        return value.item()
    return value


def _code_name(code: int) -> str:
    from embodied_r_ros.core.errors import ErrorCode

    try:
        return ErrorCode(int(code)).name
    except ValueError:
        return f"UNKNOWN_{code}"


def _print_answer(reply: Any, as_json: bool) -> int:
    if as_json:
        row = _fields(reply)
        if "error_code" in row:  # the name beside the number (msg/ErrorCode.msg)
            row["error_name"] = _code_name(row["error_code"])
        print(json.dumps(row))
    elif reply.success:
        text = f" ({reply.answer_text})" if reply.answer_text else ""
        print(f"answer: {reply.answer}{text}")
        if reply.reasoning:
            print(f"reasoning: {reply.reasoning}")
        print(f"key frames used: {reply.keyframes_used}; perception {reply.perception_s:.2f}s, "
              f"reasoning {reply.reasoning_s:.2f}s, total {reply.total_s:.2f}s")
        if reply.message and reply.message != "ok":
            print(f"note: {reply.message}")
    else:
        print(f"failed ({_code_name(reply.error_code)}, code {int(reply.error_code)}): "
              f"{reply.message}", file=sys.stderr)
    return EXIT_OK if reply.success else EXIT_FAILED


def main(argv: list[str], command: str) -> int:
    try:
        args = _parser(command).parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_USAGE
    from embodied_r_ros.client import GraphUnavailableError, connect

    try:
        with connect(namespace=args.namespace) as client:
            if command == "ask":
                client.wait_for_graph(args.wait)
                if args.stream:
                    seen = {"stage": "", "text": ""}

                    def feedback(f: Any) -> None:
                        if f.stage != seen["stage"]:
                            seen["stage"] = f.stage
                            print(f"[{f.stage}]", file=sys.stderr, flush=True)
                        new = f.partial_text[len(seen["text"]):]
                        seen["text"] = f.partial_text
                        if new and not args.json:
                            print(new, end="", file=sys.stderr, flush=True)

                    _status, reply = client.ask_streaming(args.question, args.choice,
                                                          args.timeout, feedback,
                                                          threading.Event())
                    if seen["text"] and not args.json:
                        print(file=sys.stderr)
                else:
                    reply = client.ask(args.question, args.choice, args.timeout)
                return _print_answer(reply, args.json)
            if command == "reset":
                reply = client.reset(args.wait)
                print(json.dumps(_fields(reply)) if args.json else reply.message)
                return EXIT_OK if reply.success else EXIT_FAILED
            status = client.status(args.wait)
            if args.json:
                print(json.dumps(_fields(status)))
            else:
                for name, value in _fields(status).items():
                    if name != "header":
                        print(f"{name}: {value}")
            return EXIT_OK
    except (GraphUnavailableError, TimeoutError) as exc:
        print(f"embodied-r {command}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


def ask(argv: list[str]) -> int:
    return main(argv, "ask")


def reset(argv: list[str]) -> int:
    return main(argv, "reset")


def status(argv: list[str]) -> int:
    return main(argv, "status")
