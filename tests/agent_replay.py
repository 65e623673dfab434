"""A small OpenAI-compatible chat-completions server on 127.0.0.1 that answers from a script (tests only).

Each request takes the next step of the script, or asks `route(body)` for one: a reply (streamed as
server-sent events when the request says `stream`), an HTTP error status, a delay, or a dropped connection.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
# NOTE: ../shared/seeds beside the checkout (CI, the main clone); a worktree nested deeper finds it further up.
SEEDS = next((d / "shared" / "seeds" for d in ROOT.parents if (d / "shared" / "seeds").is_dir()),
             ROOT.parent / "shared" / "seeds")
MAX_SLEEP_S = 10.0  # no step holds a connection longer than this


@dataclass(frozen=True)
class Step:
    text: str = ""  # the reply's content
    finish: str = "stop"
    status: int = 200  # anything else: an error body with this status
    headers: tuple = ()  # extra response headers, e.g. (("Retry-After", "0"),)
    sleep_s: float = 0.0  # wait before answering (a timeout test)
    drop: bool = False  # close the connection without answering


def reply(text: str, finish: str = "stop") -> Step:
    return Step(text=text, finish=finish)


def error(status: int, message: str = "", **kw) -> Step:
    return Step(status=status, text=message or f"status {status}", **kw)


def seed_reply(prefix: str) -> str:
    """A recorded reply from ../shared/seeds, read at test time (prefix: '000', '002', ...)."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    return found[0].read_text() if found else ""


@dataclass
class Replay:
    """The server's state: the script, what it received, and how to pick a step."""

    script: list[Step] = field(default_factory=list)
    route: Callable[[dict], Step] | None = None
    requests: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_step(self, body: dict) -> Step:
        with self.lock:
            self.requests.append(body)
            if self.route is not None:
                return self.route(body)
            return self.script.pop(0) if self.script else error(500, "the replay script is exhausted")


def _handler(state: Replay):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: tests read results, not access logs
            pass

        def _send(self, status: int, payload: dict, headers=()):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "replay", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.headers.append(dict(self.headers))
            if not self.path.rstrip("/").endswith("/v1/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            step = state.next_step(body)
            time.sleep(min(step.sleep_s, MAX_SLEEP_S))
            if step.drop:
                self.close_connection = True
                self.connection.close()
                return
            if step.status != 200:
                self._send(step.status, {"error": {"message": step.text, "type": "replay"}}, step.headers)
                return
            prompt_tokens = sum(len(str(m.get("content", ""))) // 4 for m in body.get("messages", []))
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(step.text) // 4,
                     "total_tokens": prompt_tokens + len(step.text) // 4}
            base = {"id": "chatcmpl-replay", "created": int(time.time()), "model": body.get("model", "replay")}
            if not body.get("stream"):
                self._send(200, {**base, "object": "chat.completion", "usage": usage, "choices": [
                    {"index": 0, "finish_reason": step.finish,
                     "message": {"role": "assistant", "content": step.text}}]}, step.headers)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = {**base, "object": "chat.completion.chunk"}
            pieces = [step.text[i:i + 700] for i in range(0, len(step.text), 700)] or [""]
            events = [{**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": p},
                                             "finish_reason": None}]} for p in pieces]
            events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": step.finish}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append({**chunk, "choices": [], "usage": usage})
            for e in events:
                self.wfile.write(f"data: {json.dumps(e)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that gave up (the timeout tests) closes the socket under a late answer: not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class ReplayServer:
    """`with ReplayServer(state) as url:` serves on 127.0.0.1 (a free port) until the block ends."""

    def __init__(self, state: Replay):
        self.state = state
        self.httpd = _Server(("127.0.0.1", 0), _handler(state))
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (for the refused-connection test)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
