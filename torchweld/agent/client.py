"""An OpenAI-compatible chat endpoint through the `openai` library: retries with backoff, timeouts, one-line errors.

NOTE: the library's own retries are off (max_retries=0): every attempt, its wait and its cap are decided here,
so a run's behaviour against a flaky endpoint is the same with every version of the library.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from typing import Callable

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointError(Exception):
    """The endpoint cannot be used at all (refused, wrong URL, refused key, unknown model): the run stops."""


class RequestFailed(Exception):
    """One request failed for good (retries spent, or a request the endpoint rejects): its conversation stops."""


class Dropped(Exception):
    """A connection that broke after the endpoint had answered (mid-stream): worth another attempt."""


@dataclass(frozen=True)
class ClientOptions:
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 600.0  # per request; with streaming, per wait between chunks
    connect_timeout_s: float = 10.0
    retries: int = 6  # attempts after the first, for 429, 5xx, timeouts and dropped connections
    backoff_s: float = 2.0  # first wait; doubles each retry, with jitter, up to backoff_max_s
    backoff_max_s: float = 60.0
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float
    attempts: int


def api_key(env_name: str) -> str | None:
    """The key from the environment variable the user named (None: unset; local servers need none)."""
    value = os.environ.get(env_name)
    return value if value else None


class Redactor:
    """Replaces the API key wherever it might appear in text bound for a screen, a log or a file."""

    def __init__(self, secret: str | None):
        self.secret = secret if secret and len(secret) >= 4 else None

    def text(self, s: str) -> str:
        return s.replace(self.secret, "[api key]") if self.secret and isinstance(s, str) else s

    def data(self, x):
        if isinstance(x, str):
            return self.text(x)
        if isinstance(x, dict):
            return {k: self.data(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [self.data(v) for v in x]
        return x


class ChatClient:
    """`chat(messages) -> Reply`; raises EndpointError or RequestFailed with a one-line message."""

    def __init__(self, opts: ClientOptions, key: str | None, sleep: Callable[[float], None] = time.sleep):
        try:
            import openai
        except ImportError as e:
            raise EndpointError(f"the agent needs the openai package ({e.name} is missing): "
                                "pip install 'torchweld[agent]'") from e
        self.opts, self.openai, self.sleep = opts, openai, sleep
        self.redact = Redactor(key)
        self.url = opts.base_url.rstrip("/")
        # NOTE: a local server needs no key but the library insists on one: a placeholder, never a real key.
        self.client = openai.OpenAI(base_url=self.url, api_key=key or "none", max_retries=0,
                                    timeout=openai.Timeout(opts.timeout_s, connect=opts.connect_timeout_s))
        self.reached = False  # the endpoint has answered at least once (then a dropped connection is retried)
        self.usage_in_stream = True

    def chat(self, messages: list[dict]) -> Reply:
        t0 = time.monotonic()
        for attempt in range(self.opts.retries + 1):
            try:
                reply = self._once(messages)
            except Exception as e:  # noqa: BLE001 - every library error is classified below
                wait = self._classify(e, attempt)
                self.sleep(wait)
                continue
            return Reply(reply[0], reply[1], reply[2], reply[3], time.monotonic() - t0, attempt + 1)
        raise AssertionError("unreachable")  # _classify raises on the last attempt

    def _kwargs(self, messages: list[dict]) -> dict:
        kw = {"model": self.opts.model, "messages": messages}
        if self.opts.max_tokens is not None:
            kw["max_tokens"] = self.opts.max_tokens
        if self.opts.temperature is not None:
            kw["temperature"] = self.opts.temperature
        return kw

    def _once(self, messages: list[dict]) -> tuple[str, str | None, int | None, int | None]:
        kw = self._kwargs(messages)
        if not self.opts.stream:
            r = self.client.chat.completions.create(**kw)
            self.reached = True
            if not getattr(r, "choices", None):
                raise EndpointError(f"{self.url}/chat/completions answered without choices: not an "
                                    "OpenAI-compatible chat endpoint?")
            c = r.choices[0]
            usage = getattr(r, "usage", None)
            return (c.message.content or "", c.finish_reason, getattr(usage, "prompt_tokens", None),
                    getattr(usage, "completion_tokens", None))
        extra = {"stream_options": {"include_usage": True}} if self.usage_in_stream else {}
        try:
            stream = self.client.chat.completions.create(**kw, stream=True, **extra)
        except self.openai.APIStatusError as e:
            if not extra or e.status_code not in (400, 422):
                raise
            # NOTE: some servers reject stream_options: ask without it (no token counts) from now on.
            self.usage_in_stream = False
            stream = self.client.chat.completions.create(**kw, stream=True)
        self.reached = True
        parts, finish, usage = [], None, None
        for chunk in stream:
            if getattr(chunk, "usage", None):
                usage = chunk.usage
            for c in chunk.choices or []:
                if c.delta is not None and c.delta.content:
                    parts.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
        if finish is None and not parts:
            raise Dropped("the stream ended without any content")
        return ("".join(parts), finish, getattr(usage, "prompt_tokens", None),
                getattr(usage, "completion_tokens", None))

    def _classify(self, e: Exception, attempt: int) -> float:
        """The seconds to wait before the next attempt, or raise EndpointError / RequestFailed."""
        o, last = self.openai, attempt >= self.opts.retries
        where = f"{self.url}/chat/completions"
        if isinstance(e, EndpointError):
            raise e
        if _is_timeout(e):
            if last:
                raise RequestFailed(f"no answer from {where} within {self.opts.timeout_s:g} s, "
                                    f"{attempt + 1} attempts") from None
            return self._backoff(attempt)
        if isinstance(e, (o.APIConnectionError, Dropped)) or _is_transport(e):
            why = _connection_cause(e)
            if not self.reached:
                # NOTE: never answered: a wrong host or port, or a server not started; retrying only delays saying so.
                raise EndpointError(f"cannot connect to {self.url} ({why}): is the server running and "
                                    "--base-url right?") from None
            if last:
                raise RequestFailed(f"lost the connection to {self.url} ({why}), {attempt + 1} attempts") from None
            return self._backoff(attempt)
        if isinstance(e, o.APIStatusError):
            self.reached = True
            status, msg = e.status_code, self.redact.text(_server_message(e))
            if status in (401, 403):
                raise EndpointError(f"{where} refused the key (HTTP {status}): check the variable named by "
                                    f"--api-key-env ({self.opts.api_key_env})") from None
            if status == 404:
                raise EndpointError(f"{where} answered 404 ({msg}): check --base-url (it usually ends in /v1) "
                                    f"and --model {self.opts.model}") from None
            if status in RETRY_STATUS:
                if last:
                    raise RequestFailed(f"HTTP {status} from {where} ({msg}), {attempt + 1} attempts") from None
                return self._backoff(attempt, _retry_after(e))
            raise RequestFailed(f"HTTP {status} from {where}: {msg}") from None
        if isinstance(e, (o.APIResponseValidationError, ValueError, AttributeError, TypeError)):
            raise EndpointError(f"{where} did not answer as an OpenAI-compatible chat endpoint "
                                f"({type(e).__name__}: {self.redact.text(str(e))[:200]})") from None
        raise e

    def _backoff(self, attempt: int, hint: float | None = None) -> float:
        base = min(self.opts.backoff_max_s, self.opts.backoff_s * 2 ** attempt)
        wait = base * (0.5 + random.random() / 2)  # jitter: many conversations do not retry in step
        if hint is not None:
            wait = max(wait, min(hint, self.opts.backoff_max_s))
        return wait


def _is_timeout(e: BaseException) -> bool:
    """The library's timeout, or the HTTP layer's read timeout raised while a stream is read."""
    import openai

    return isinstance(e, openai.APITimeoutError) or (type(e).__name__.endswith("Timeout") and _is_transport(e))


def _is_transport(e: BaseException) -> bool:
    """An error of the HTTP layer under the library (its module name starts with httpx or httpcore)."""
    return type(e).__module__.split(".")[0].rstrip("0123456789") in ("httpx", "httpcore")


def _connection_cause(e: BaseException) -> str:
    """The innermost cause's words: 'Connection refused', 'Name or service not known', ..."""
    seen, cur = [], e
    while cur is not None and len(seen) < 8:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    for c in reversed(seen):
        text = getattr(c, "strerror", None) or str(c)
        if text and text != "Connection error.":
            return text.splitlines()[0][:160]
    return "connection error"


def _server_message(e) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg).splitlines()[0][:200]
    return (str(getattr(e, "message", "")) or type(e).__name__).splitlines()[0][:200]


def _retry_after(e) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
