"""OpenAI-compatible HTTP backends against real servers.

* A real `transformers serve` process (the OpenAI-compatible server that ships with
  transformers) is started on 127.0.0.1 with a free port, pinned to the tiny Qwen2.5-VL
  folder, and stopped after the module. Its greedy answers must equal the in-process
  transformers backend's answers for the same model and inputs.
* Failure modes (503 then success, 4xx, slow answers, nothing listening) use a tiny
  stdlib HTTP server started in a thread: a real socket server whose behaviour the test
  controls. No mocks.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cv2
import numpy as np
import pytest

from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
from embodied_r_ros.core.backends.images import from_data_url
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.backends.openai_backend import (
    OpenAIPerceiver,
    OpenAIReasoner,
    build_body,
    normalize_base_url,
)
from embodied_r_ros.core.errors import (
    CancelledError,
    ModelUnavailableError,
    PerceptionError,
    ReasoningError,
    RequestTimeoutError,
)
from embodied_r_ros.core.types import GenerationSettings

from helpers.servers import free_port, transformers_serve

GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=10)
MESSAGES = [
    {"role": "system", "content": "Reason, then answer."},
    {"role": "user", "content": "Question: Which is closer?\nChoices:\nA. lamp\nB. sofa"},
]


def _frames(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(240, 320, 3), dtype=np.uint8) for _ in range(n)]


# --------------------------------------------------------------- transformers serve
@pytest.fixture(scope="module")
def served_vlm(tiny_models, tmp_path_factory):
    """(base_url, model name) of a `transformers serve` process pinned to the tiny VLM."""
    model = str(tiny_models.vlm)
    with transformers_serve(model, tmp_path_factory.mktemp("serve")) as (_proc, base_url):
        yield base_url, model


def _spec(base_url: str, model: str, **kw) -> ModelSpec:
    return ModelSpec(backend="openai", model=model, base_url=base_url, max_new_tokens=10, **kw)


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
def test_perceiver_matches_in_process(served_vlm, tiny_models, image_format) -> None:
    """Same model, same frames: the server (which decodes the data URLs) and the
    in-process backend (which decodes its own JPEG) answer alike."""
    base_url, model = served_vlm
    remote = make_perceiver(_spec(base_url, model, image_format=image_format))
    local = make_perceiver(ModelSpec(model=str(tiny_models.vlm), device="cpu", image_format=image_format))
    try:
        assert isinstance(remote, OpenAIPerceiver)
        for n in (1, 2):
            frames = _frames(n, seed=n)
            prompt = "Describe the scene." if n == 1 else "What changed?"
            got = remote.describe(frames, prompt, GREEDY)
            # `transformers serve` strips surrounding whitespace from the reply.
            assert got and got == local.describe(frames, prompt, GREEDY).strip()
        batch = remote.describe_batch([(_frames(1), "a"), (_frames(2), "b")], GREEDY)
        assert len(batch) == 2 and all(isinstance(t, str) for t in batch)
    finally:
        remote.close()
        local.close()


def test_reasoner_matches_in_process_and_streams(served_vlm, tiny_models) -> None:
    base_url, model = served_vlm
    remote = make_reasoner(_spec(base_url, model))
    local = make_reasoner(ModelSpec(model=str(tiny_models.vlm), device="cpu"))
    try:
        assert isinstance(remote, OpenAIReasoner)
        text = remote.generate(MESSAGES, GREEDY)
        assert text and text == remote.generate(MESSAGES, GREEDY)
        assert text == local.generate(MESSAGES, GREEDY).strip()  # the server strips replies
        pieces: list[str] = []
        streamed = remote.generate(MESSAGES, GREEDY, on_text=pieces.append)
        assert len(pieces) > 1 and "".join(pieces) == streamed
        assert streamed.strip() == text
        assert remote.generate_batch([MESSAGES, MESSAGES], GREEDY) == [text, text]
        assert remote.health()["ok"] is True
    finally:
        remote.close()
        local.close()


def test_should_stop_cancels_stream(served_vlm) -> None:
    base_url, model = served_vlm
    remote = make_reasoner(_spec(base_url, model))
    pieces: list[str] = []
    try:
        with pytest.raises(CancelledError):
            remote.generate(
                MESSAGES,
                GenerationSettings(max_new_tokens=40),
                on_text=pieces.append,
                should_stop=lambda: len(pieces) >= 2,
            )
        assert len(pieces) == 2
    finally:
        remote.close()


def test_unknown_model_is_model_unavailable(served_vlm) -> None:
    base_url, _ = served_vlm
    with pytest.raises(ModelUnavailableError) as info:
        make_reasoner(_spec(base_url, "someone/not-served"))
    assert base_url in str(info.value) and "someone/not-served" in str(info.value)


# ------------------------------------------------------------ scripted test server
class _Script:
    """What the scripted server does; counts the requests it got."""

    def __init__(self) -> None:
        self.fail_first = 0  # this many chat requests get `fail_status`
        self.fail_status = 503
        self.delay_s = 0.0
        self.chat_calls = 0
        self.bodies: list[dict] = []
        self.reply = "<think>ok</think><answer>A</answer>"


@pytest.fixture()
def scripted():
    script = _Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.chat_calls += 1
            script.bodies.append(body)
            if script.delay_s:
                time.sleep(script.delay_s)
            if script.chat_calls <= script.fail_first:
                self._send(script.fail_status, {"error": {"message": "scripted failure"}})
                return
            self._send(
                200,
                {"choices": [{"index": 0, "message": {"role": "assistant", "content": script.reply}}]},
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_retries_after_server_errors(scripted) -> None:
    url, script = scripted
    script.fail_first = 2
    reasoner = make_reasoner(_spec(url, "m", max_retries=2, retry_backoff_s=0.01))
    try:
        assert reasoner.generate(MESSAGES, GREEDY) == script.reply
        assert script.chat_calls == 3
    finally:
        reasoner.close()


def test_gives_up_after_max_retries(scripted) -> None:
    url, script = scripted
    script.fail_first = 10
    reasoner = make_reasoner(_spec(url, "m", max_retries=1, retry_backoff_s=0.01))
    try:
        with pytest.raises(ReasoningError, match="HTTP 503") as info:
            reasoner.generate(MESSAGES, GREEDY)
        assert url in str(info.value) and "'m'" in str(info.value)
        assert script.chat_calls == 2
    finally:
        reasoner.close()


def test_429_is_retried_but_400_is_not(scripted) -> None:
    url, script = scripted
    script.fail_first, script.fail_status = 1, 429
    reasoner = make_reasoner(_spec(url, "m", max_retries=2, retry_backoff_s=0.01))
    try:
        assert reasoner.generate(MESSAGES, GREEDY) == script.reply
        assert script.chat_calls == 2
        script.chat_calls, script.fail_first, script.fail_status = 0, 5, 400
        with pytest.raises(ReasoningError, match="HTTP 400"):
            reasoner.generate(MESSAGES, GREEDY)
        assert script.chat_calls == 1
    finally:
        reasoner.close()


def test_timeout(scripted) -> None:
    url, script = scripted
    script.delay_s = 4.0
    reasoner = make_reasoner(_spec(url, "m", timeout_s=0.3, max_retries=0))
    try:
        start = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="timeout_s=0.3"):
            reasoner.generate(MESSAGES, GREEDY)
        assert time.monotonic() - start < 3.0  # the server answers only after 4 s
    finally:
        reasoner.close()


def test_perceiver_sends_the_reference_jpeg_data_urls(scripted) -> None:
    """Default request: prompt text, then each frame as the data URL of
    cv2.imencode(".jpg", bgr_frame) at full resolution (the reference's bytes)."""
    url, script = scripted
    perceiver = make_perceiver(_spec(url, "m", extra={"repetition_penalty": 1.05}))
    try:
        frames = _frames(2)
        assert perceiver.describe(frames, "What changed?", GREEDY) == script.reply
        body = script.bodies[-1]
        parts = body["messages"][0]["content"]
        assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
        assert parts[0]["text"] == "What changed?"
        for part, rgb in zip(parts[1:], frames):
            ok, reference = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]))
            assert ok
            expected = "data:image/jpeg;base64," + base64.b64encode(reference.tobytes()).decode()
            assert part["image_url"]["url"] == expected
            assert from_data_url(part["image_url"]["url"]).shape == (240, 320, 3)
        assert body["repetition_penalty"] == 1.05 and body["max_tokens"] == 10
        assert body["model"] == "m" and body["temperature"] == 0.0
    finally:
        perceiver.close()


def test_perceiver_image_settings_reach_the_request(scripted) -> None:
    url, script = scripted
    perceiver = make_perceiver(_spec(url, "m", max_image_side=160, image_format="png"))
    try:
        perceiver.describe(_frames(1), "Describe.", GREEDY)
        image_url = script.bodies[-1]["messages"][0]["content"][1]["image_url"]["url"]
        assert image_url.startswith("data:image/png;base64,")
        assert from_data_url(image_url).shape == (120, 160, 3)
    finally:
        perceiver.close()


def test_perception_errors_are_perception_errors(scripted) -> None:
    url, script = scripted
    script.fail_first, script.fail_status = 5, 422
    perceiver = make_perceiver(_spec(url, "m", max_retries=0))
    try:
        with pytest.raises(PerceptionError, match="HTTP 422"):
            perceiver.describe(_frames(1), "Describe.", GREEDY)
    finally:
        perceiver.close()


def test_unreachable_server_fails_at_startup() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ModelUnavailableError) as info:
        make_reasoner(_spec(url, "m", max_retries=1, retry_backoff_s=0.01))
    assert url in str(info.value) and "cannot connect" in str(info.value)


def test_api_key_from_env(scripted, monkeypatch) -> None:
    url, _ = scripted
    monkeypatch.setenv("MY_TEST_KEY", "secret-123")
    reasoner = make_reasoner(_spec(url, "m", api_key_env="MY_TEST_KEY"))
    try:
        assert reasoner.client._http.headers["Authorization"] == "Bearer secret-123"
    finally:
        reasoner.close()


def test_pure_helpers() -> None:
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    body = build_body(
        "m", MESSAGES, GenerationSettings(temperature=0.7, top_p=0.9, seed=3), True,
        {"check_model_on_start": False, "min_p": 0.1},
    )
    assert body["stream"] is True and body["top_p"] == 0.9 and body["seed"] == 3
    assert body["min_p"] == 0.1 and "check_model_on_start" not in body
