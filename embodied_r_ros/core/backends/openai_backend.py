"""Backends over an OpenAI-compatible HTTP server (/v1/chat/completions).

Works with a vLLM server, `transformers serve`, or a hosted API. Images go as base64
data URLs in `image_url` content parts, after the prompt text, as the reference sends
them; their encoding (JPEG quality 95 at full resolution by default) is the spec's
`image_format`, `jpeg_quality` and `max_image_side` (backends/images.py, docs/method.md §3).
Requests use httpx with a per-request timeout
and a bounded number of retries with exponential backoff on connection errors, HTTP 429
and HTTP 5xx; other 4xx answers fail at once. With `on_text` or `should_stop` the reply
is streamed (server-sent events), so text arrives early and cancellation is prompt.

Errors name the server URL, the model and what failed:
* ModelUnavailableError: server unreachable (startup check, or after all retries), or
  the model is not served there;
* RequestTimeoutError: no answer within `timeout_s`;
* PerceptionError / ReasoningError: any other failed request or malformed answer;
* CancelledError: `should_stop()` turned true while streaming.

Client-side key read from `ModelSpec.extra` (everything else there is merged into the
request body, e.g. `repetition_penalty` for vLLM):
* `check_model_on_start`: default true; false skips the startup check (the first
  request then reports an unreachable server).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from embodied_r_ros.core.backends.base import PerceptionRequest, StopCheck, TextCallback
from embodied_r_ros.core.backends.images import ImageEncoding, to_data_url
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.errors import (
    CancelledError,
    ConfigError,
    EmbodiedRError,
    ModelUnavailableError,
    PerceptionError,
    ReasoningError,
    RequestTimeoutError,
)
from embodied_r_ros.core.types import ChatMessage, GenerationSettings

CLIENT_EXTRA_KEYS = frozenset({"check_model_on_start"})
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


def normalize_base_url(url: str) -> str:
    """'http://h:8000' or 'http://h:8000/v1/' -> 'http://h:8000/v1'."""
    url = url.rstrip("/")
    if not url.endswith("/v1"):
        url = url + "/v1"
    return url


def build_body(
    model: str,
    messages: Sequence[ChatMessage],
    settings: GenerationSettings,
    stream: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of one /chat/completions request."""
    body: dict[str, Any] = {
        "model": model,
        "messages": list(messages),
        "max_tokens": int(settings.max_new_tokens),
        "temperature": float(settings.temperature),
        "stream": stream,
    }
    if settings.temperature > 0:
        body["top_p"] = float(settings.top_p)
    if settings.seed is not None:
        body["seed"] = int(settings.seed)
    for key, value in (extra or {}).items():
        if key not in CLIENT_EXTRA_KEYS:
            body[key] = value
    return body


def image_message(
    images: Sequence[np.ndarray], prompt: str, encoding: ImageEncoding | None = None
) -> ChatMessage:
    """One user message: the prompt text, then the images as data URLs, in order.

    Text before images is the reference's order (docs/method.md §3); the in-process
    backends render the same order through the chat template.
    """
    content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    content.extend(
        {"type": "image_url", "image_url": {"url": to_data_url(img, encoding)}} for img in images
    )
    return {"role": "user", "content": content}


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


class _Retryable(Exception):
    """A failure worth another attempt (connection problem, 429, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None, unreachable: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.unreachable = unreachable


class OpenAIClient:
    """Thin synchronous client for one model on one OpenAI-compatible server.

    `error_cls` is the error raised for failed requests (PerceptionError for the
    perceiver, ReasoningError for the reasoner).
    """

    def __init__(self, spec: ModelSpec, error_cls: type[EmbodiedRError]) -> None:
        import httpx

        if spec.backend != "openai":
            raise ConfigError(f"backend: expected 'openai', got {spec.backend!r}")
        self.spec = spec
        self.base_url = normalize_base_url(spec.base_url)
        self.model = spec.request_model_name
        self.error_cls = error_cls
        headers = {"Accept": "application/json"}
        key = os.environ.get(spec.api_key_env, "").strip()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        timeout = httpx.Timeout(spec.timeout_s, connect=min(spec.timeout_s, 10.0))
        self._http = httpx.Client(timeout=timeout, headers=headers)
        self._closed = False

    # ----------------------------------------------------------------- plumbing
    def _where(self) -> str:
        return f"server {self.base_url} model {self.model!r}"

    def _sleep_before_retry(self, attempt: int, retry_after: float | None) -> None:
        delay = self.spec.retry_backoff_s * (2**attempt)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_S))
        if delay > 0:
            time.sleep(delay)

    def _with_retries(self, what: str, attempt_fn: Any) -> Any:
        """Run `attempt_fn()`; retry `_Retryable` failures up to max_retries times."""
        last: _Retryable | None = None
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                self._sleep_before_retry(attempt - 1, last.retry_after if last else None)
            try:
                return attempt_fn()
            except _Retryable as exc:
                last = exc
        assert last is not None
        tries = self.spec.max_retries + 1
        message = f"{self._where()}: {what} failed after {tries} attempt(s): {last}"
        if last.unreachable:
            raise ModelUnavailableError(message)
        raise self.error_cls(message)

    def _classify_status(self, response: Any, what: str) -> None:
        """Raise for a non-2xx response: _Retryable for 429/5xx, typed error otherwise."""
        status = response.status_code
        if 200 <= status < 300:
            return
        try:
            detail = _snippet(response.read().decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001
            detail = ""
        if status in RETRY_STATUS or status >= 500:
            retry_after = None
            header = response.headers.get("retry-after")
            if header:
                try:
                    retry_after = float(header)
                except ValueError:
                    retry_after = None
            raise _Retryable(f"HTTP {status}: {detail}", retry_after=retry_after)
        message = f"{self._where()}: {what} rejected with HTTP {status}: {detail}"
        if status in (401, 403):
            raise ModelUnavailableError(message + f" (check the key in ${self.spec.api_key_env})")
        if status == 404 and ("model" in detail.lower() or what == "model list"):
            raise ModelUnavailableError(message)
        if status == 400 and "model" in detail.lower() and self.model in detail:
            raise ModelUnavailableError(message)
        raise self.error_cls(message)

    def _transport_error(self, exc: Exception, what: str) -> Exception:
        import httpx

        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return _Retryable(f"cannot connect: {exc}", unreachable=True)
        if isinstance(exc, httpx.TimeoutException):
            return RequestTimeoutError(
                f"{self._where()}: {what} got no answer within timeout_s={self.spec.timeout_s:g} s"
            )
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return _Retryable(f"connection dropped: {type(exc).__name__}: {exc}", unreachable=True)
        return self.error_cls(f"{self._where()}: {what} failed: {type(exc).__name__}: {exc}")

    # --------------------------------------------------------------- public API
    def list_models(self) -> list[str]:
        """Model ids the server lists at GET /models (one retry cycle)."""

        def attempt() -> list[str]:
            try:
                response = self._http.get(f"{self.base_url}/models")
            except Exception as exc:  # noqa: BLE001
                raise self._transport_error(exc, "model list") from exc
            self._classify_status(response, "model list")
            try:
                data = response.json().get("data", [])
                return [str(item.get("id")) for item in data if isinstance(item, dict)]
            except (ValueError, AttributeError) as exc:
                raise self.error_cls(f"{self._where()}: model list is not valid JSON: {exc}") from exc

        return self._with_retries("model list", attempt)

    def check_model(self) -> None:
        """Startup check: the server answers and serves `model` (ModelUnavailableError if not).

        A server whose model list is empty or unavailable (HTTP 404/405) is accepted: it
        cannot be verified, and the first request will tell.
        """
        try:
            models = self.list_models()
        except ModelUnavailableError:
            raise
        except EmbodiedRError as exc:
            if "HTTP 404" in str(exc) or "HTTP 405" in str(exc):
                return
            raise ModelUnavailableError(str(exc)) from exc
        if models and self.model not in models:
            shown = ", ".join(models[:10]) + (" ..." if len(models) > 10 else "")
            raise ModelUnavailableError(
                f"{self._where()}: model not served there; the server lists: {shown}. "
                "Set `served_model_name` (or `model`) to one of these."
            )

    def health(self) -> dict[str, Any]:
        """Non-raising status: {"ok", "url", "model", "detail", "latency_s"}."""
        start = time.monotonic()
        try:
            self.check_model()
            ok, detail = True, "ok"
        except EmbodiedRError as exc:
            ok, detail = False, str(exc)
        return {
            "ok": ok,
            "url": self.base_url,
            "model": self.model,
            "detail": detail,
            "latency_s": time.monotonic() - start,
        }

    def chat(
        self,
        messages: Sequence[ChatMessage],
        settings: GenerationSettings,
        on_text: TextCallback | None = None,
        should_stop: StopCheck | None = None,
    ) -> str:
        """One chat completion; streamed when `on_text` or `should_stop` is given."""
        if self._closed:
            raise self.error_cls(f"{self._where()}: client is closed")
        stream = on_text is not None or should_stop is not None
        body = build_body(self.model, messages, settings, stream, self.spec.extra)
        if stream:
            return self._chat_stream(body, on_text, should_stop)
        return self._with_retries("chat completion", lambda: self._chat_once(body))

    def _chat_once(self, body: dict[str, Any]) -> str:
        try:
            response = self._http.post(f"{self.base_url}/chat/completions", json=body)
        except Exception as exc:  # noqa: BLE001
            raise self._transport_error(exc, "chat completion") from exc
        self._classify_status(response, "chat completion")
        try:
            data = response.json()
            content = data["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise self.error_cls(
                f"{self._where()}: malformed chat completion: {_snippet(response.text)}"
            ) from exc
        return content or ""

    def _chat_stream(
        self, body: dict[str, Any], on_text: TextCallback | None, should_stop: StopCheck | None
    ) -> str:
        pieces: list[str] = []

        def attempt() -> str:
            try:
                with self._http.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
                    self._classify_status(response, "streamed chat completion")
                    for piece in self._sse_pieces(response, should_stop):
                        pieces.append(piece)
                        if on_text is not None:
                            on_text(piece)
            except Exception as exc:  # noqa: BLE001 - sorted below
                err = exc if isinstance(exc, (_Retryable, EmbodiedRError)) else (
                    self._transport_error(exc, "streamed chat completion")
                )
                if isinstance(err, _Retryable) and pieces:
                    # Text already reached the caller: a retry would repeat it.
                    raise self.error_cls(
                        f"{self._where()}: stream broke after {len(pieces)} piece(s): {err}"
                    ) from exc
                if err is exc:
                    raise
                raise err from exc
            return "".join(pieces)

        return self._with_retries("streamed chat completion", attempt)

    def _sse_pieces(self, response: Any, should_stop: StopCheck | None) -> Iterator[str]:
        """Yield content deltas from an SSE response; stop on [DONE] or end of stream."""
        for line in response.iter_lines():
            if should_stop is not None and should_stop():
                raise CancelledError(f"{self._where()}: generation cancelled by the caller")
            if not line or not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                return
            try:
                event = json.loads(payload)
            except ValueError as exc:
                raise self.error_cls(f"{self._where()}: bad stream event: {_snippet(payload)}") from exc
            if "error" in event:
                raise self.error_cls(f"{self._where()}: server error in stream: {event['error']}")
            for choice in event.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text

    def close(self) -> None:
        self._closed = True
        self._http.close()


class _OpenAIBase:
    _error_cls: type[EmbodiedRError] = ReasoningError

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = f"openai:{spec.request_model_name}@{normalize_base_url(spec.base_url)}"
        self.client = OpenAIClient(spec, self._error_cls)
        if spec.extra.get("check_model_on_start", True):
            try:
                self.client.check_model()
            except BaseException:
                self.client.close()
                raise

    def health(self) -> dict[str, Any]:
        """Server and model status (see `OpenAIClient.health`); never raises."""
        return self.client.health()

    def _map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        """Run `fn` over items with up to `batch_size` requests in flight, in order."""
        if len(items) <= 1 or self.spec.batch_size <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.spec.batch_size, len(items))) as pool:
            return list(pool.map(fn, items))

    def close(self) -> None:
        self.client.close()


class OpenAIPerceiver(_OpenAIBase):
    """Images + prompt -> text through an OpenAI-compatible vision model."""

    _error_cls = PerceptionError

    def describe(
        self,
        images: Sequence[np.ndarray],
        prompt: str,
        settings: GenerationSettings | None = None,
    ) -> str:
        settings = settings or self.spec.settings()
        message = image_message(images, prompt, self.spec.image_encoding())
        return self.client.chat([message], settings)

    def describe_batch(
        self,
        requests: Sequence[PerceptionRequest],
        settings: GenerationSettings | None = None,
    ) -> list[str]:
        """Concurrent requests (up to `batch_size` in flight); results in input order."""
        return self._map(lambda req: self.describe(req[0], req[1], settings), list(requests))


class OpenAIReasoner(_OpenAIBase):
    """Chat messages -> text through an OpenAI-compatible server."""

    _error_cls = ReasoningError

    def generate(
        self,
        messages: Sequence[ChatMessage],
        settings: GenerationSettings | None = None,
        on_text: TextCallback | None = None,
        should_stop: StopCheck | None = None,
    ) -> str:
        return self.client.chat(messages, settings or self.spec.settings(), on_text, should_stop)

    def generate_batch(
        self,
        conversations: Sequence[Sequence[ChatMessage]],
        settings: GenerationSettings | None = None,
    ) -> list[str]:
        """Concurrent requests (up to `batch_size` in flight); results in input order."""
        return self._map(lambda conv: self.generate(conv, settings), list(conversations))
