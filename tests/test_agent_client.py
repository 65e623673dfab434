"""The chat client against a real HTTP server on 127.0.0.1: replies, streaming, retries, timeouts, clear errors."""
import time

import pytest

pytest.importorskip("openai", reason="the agent's client needs the openai package: pip install 'torchweld[agent]'")

from agent_replay import Replay, ReplayServer, Step, error, free_port, reply  # noqa: E402
from torchweld.agent.client import ChatClient, ClientOptions, EndpointError, Redactor, RequestFailed  # noqa: E402

HI = [{"role": "user", "content": "hi"}]
KEY = "sk-planted-0123456789abcdef"


def client(url, key=None, **kw):
    opts = dict(base_url=url, model="replay", retries=2, backoff_s=0.01, backoff_max_s=0.05, timeout_s=5.0,
                connect_timeout_s=2.0)
    opts.update(kw)
    return ChatClient(ClientOptions(**opts), key)


@pytest.mark.parametrize("stream", [False, True])
def test_reply_with_tokens(stream):
    state = Replay(script=[reply("hello " * 400)])
    with ReplayServer(state) as url:
        r = client(url, KEY, stream=stream).chat(HI)
    assert r.text == "hello " * 400 and r.finish_reason == "stop" and r.attempts == 1
    assert r.completion_tokens == len("hello " * 400) // 4 and r.prompt_tokens is not None
    assert state.requests[0]["model"] == "replay" and bool(state.requests[0].get("stream")) == stream
    auth = {k.lower(): v for k, v in state.headers[0].items()}["authorization"]
    assert auth == f"Bearer {KEY}"  # the key is sent to the endpoint, and nowhere else (test_agent_cli)


def test_429_then_success_honours_retry_after():
    state = Replay(script=[error(429, "slow down", headers=(("Retry-After", "0.2"),)), reply("ok")])
    sleeps = []
    with ReplayServer(state) as url:
        c = client(url)
        c.sleep = lambda s: (sleeps.append(s), time.sleep(s))
        r = c.chat(HI)
    assert r.text == "ok" and r.attempts == 2 and len(state.requests) == 2
    assert sleeps and sleeps[0] >= 0.05  # Retry-After (capped by backoff_max_s) over the tiny backoff


def test_500_retried_then_given_up():
    state = Replay(script=[error(500, "boom")] * 3)
    with ReplayServer(state) as url:
        with pytest.raises(RequestFailed, match=r"HTTP 500 .*boom.*3 attempts"):
            client(url, retries=2).chat(HI)
    assert len(state.requests) == 3


def test_500_then_success():
    state = Replay(script=[error(503), error(502), reply("fine")])
    with ReplayServer(state) as url:
        assert client(url).chat(HI).text == "fine"


@pytest.mark.parametrize("stream", [False, True])
def test_timeout_then_success(stream):
    state = Replay(script=[Step(text="late", sleep_s=2.0), reply("in time")])
    with ReplayServer(state) as url:
        r = client(url, timeout_s=0.5, stream=stream).chat(HI)
    assert r.text == "in time" and r.attempts == 2


def test_timeout_every_time():
    state = Replay(script=[Step(text="late", sleep_s=1.5)] * 2)
    with ReplayServer(state) as url:
        t0 = time.monotonic()
        with pytest.raises(RequestFailed, match=r"no answer .* within 0.3 s, 2 attempts"):
            client(url, timeout_s=0.3, retries=1).chat(HI)
    assert time.monotonic() - t0 < 5


def test_refused_connection_is_one_clear_line_at_once():
    url = f"http://127.0.0.1:{free_port()}/v1"
    t0 = time.monotonic()
    with pytest.raises(EndpointError) as e:
        client(url, retries=5, backoff_s=1.0).chat(HI)
    assert time.monotonic() - t0 < 3  # no retries against an endpoint that never answered
    msg = str(e.value)
    assert "\n" not in msg and url in msg and "refused" in msg.lower() and "--base-url" in msg


def test_wrong_path_is_a_404_naming_base_url():
    state = Replay(script=[reply("never")])
    with ReplayServer(state) as url:
        with pytest.raises(EndpointError, match=r"404.*--base-url"):
            client(url.removesuffix("/v1") + "/wrong").chat(HI)
    assert state.requests == []


def test_refused_key_never_echoed():
    state = Replay(script=[error(401, f"Incorrect API key provided: {KEY}")])
    with ReplayServer(state) as url:
        with pytest.raises(EndpointError) as e:
            client(url, KEY).chat(HI)
    assert "401" in str(e.value) and KEY not in str(e.value) and "OPENAI_API_KEY" in str(e.value)


def test_bad_request_is_not_retried():
    state = Replay(script=[error(400, "context too long"), reply("x")])
    with ReplayServer(state) as url:
        with pytest.raises(RequestFailed, match="HTTP 400.*context too long"):
            client(url).chat(HI)
    assert len(state.requests) == 1


def test_dropped_connection_after_a_first_answer_is_retried():
    state = Replay(script=[reply("first"), Step(drop=True), reply("second")])
    with ReplayServer(state) as url:
        c = client(url)
        assert c.chat(HI).text == "first"
        assert c.chat(HI).text == "second"
    assert len(state.requests) == 3


def test_redactor():
    r = Redactor(KEY)
    assert r.data({"a": [f"x{KEY}y", 3], "b": None}) == {"a": ["x[api key]y", 3], "b": None}
    assert Redactor(None).text("abc") == "abc" and Redactor("").text("abc") == "abc"


def test_stream_without_stream_options_where_the_server_rejects_them():
    def route(body):
        return error(400, "unknown field stream_options") if "stream_options" in body else reply("streamed")

    state = Replay(route=route)
    with ReplayServer(state) as url:
        c = client(url, stream=True)
        assert c.chat(HI).text == "streamed" and c.chat(HI).text == "streamed"
    assert ["stream_options" in b for b in state.requests] == [True, False, False]
