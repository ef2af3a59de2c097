"""A proxy in front of the tests' S3 server that fails, slows and logs requests: how the tests
show that transient errors are retried (the filesystem's own retries, boto3's) and that
reads and writes overlap a run.

Each request is forwarded as it came (its ``Host`` too: SigV4 signs it), unless a fault is
due: the first ``faults`` attempts of each distinct request (method, path and query,
``Range``) are answered ``503 SlowDown`` - what S3 says when it throttles - or have their
connection dropped without an answer.  A retry is the same request again, so it passes
once its faults are spent; a client that does not retry fails.  (A dropped connection
that was kept alive from an earlier request is sent again by curl on a new one, below
the SDK: such a drop is not one of the SDK's attempts.)
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

#: headers that belong to one connection, not to the request (RFC 9110, 7.6.1)
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
_HOP_BY_HOP |= {"expect"}  # answered here: the proxy reads the whole body before it forwards it

_SLOW_DOWN = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"  # noqa: E501


@dataclass
class Request:
    """One request as the proxy saw it: what, when (``time.perf_counter``) and how it went."""

    method: str
    path: str
    started: float
    ended: float = 0.0
    status: int = 0  # 0: dropped


@dataclass
class StoreProxy:
    upstream: str
    #: failed attempts of each distinct request before one is forwarded
    faults: int = 0
    #: "503" (SlowDown) or "drop" (the connection closed, no answer)
    fault: str = "503"
    #: which requests get the faults and the delay (all, by default)
    applies: Callable[[str, str], bool] = lambda method, path: True
    #: seconds each forwarded request that ``slow`` picks is held before it is answered
    delay_s: float = 0.0
    slow: Callable[[str, str], bool] = lambda method, path: False
    endpoint: str = ""
    requests: list[Request] = field(default_factory=list)
    failed: Counter = field(default_factory=Counter)
    _attempts: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def due(self, method: str, path: str, ranged: str | None) -> bool:
        """Whether this attempt of the request is one of its faults (and counts it)."""
        if not self.faults or not self.applies(method, path):
            return False
        with self._lock:
            self._attempts[(method, path, ranged)] += 1
            due = self._attempts[(method, path, ranged)] <= self.faults
            if due:
                self.failed[method] += 1
            return due

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


def _handler(proxy: StoreProxy) -> type[BaseHTTPRequestHandler]:
    target = urlparse(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _serve(self) -> None:
            request = Request(self.command, self.path, time.perf_counter())
            body = self._body()
            if proxy.due(self.command, self.path, self.headers.get("Range")):
                if proxy.fault == "drop":
                    self.close_connection = True
                    request.ended = time.perf_counter()
                    proxy.log(request)
                    return
                self.send_response(503)
                payload = b"" if self.command == "HEAD" else _SLOW_DOWN
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                request.status, request.ended = 503, time.perf_counter()
                proxy.log(request)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if "Content-Length" not in headers and body:
                headers["Content-Length"] = str(len(body))
            upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                payload = answer.read()
                if proxy.delay_s and proxy.slow(self.command, self.path):
                    time.sleep(proxy.delay_s)
                self.send_response(answer.status, answer.reason)
                for name, value in answer.getheaders():
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                # a HEAD's length is the object's; an answer's, its body's
                length = answer.getheader("Content-Length") if self.command == "HEAD" else str(len(payload))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                request.status = answer.status
            finally:
                upstream.close()
                request.ended = time.perf_counter()
                proxy.log(request)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

    return Handler


@contextmanager
def store_proxy(upstream: str, **how: object) -> Iterator[StoreProxy]:
    """A :class:`StoreProxy` to ``upstream`` on 127.0.0.1 for the ``with`` block."""
    proxy = StoreProxy(upstream, **how)  # type: ignore[arg-type]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    server.daemon_threads = True
    proxy.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="store-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
