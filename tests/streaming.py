"""Real streams for the tests of live video (NOTE [ video streams ], [ several streams ]):
an HTTP server on a local port, a camera that drops, pipes that threads write into."""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
from collections.abc import Iterator

import numpy as np

#: the frames' width and height
SIZE = 32


@contextlib.contextmanager
def serving(handler, payload: bytes = b"") -> Iterator[str]:
    """An HTTP server on a free local port, its address; its handlers find ``payload``
    and a ``quit`` event (set on the way out, so no handler outlives the test) on it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.payload, server.quit = payload, threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.quit.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(5)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


RAW = 12  # raw frames of SIZE x SIZE rgb24


def raw_frames() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, (RAW, SIZE, SIZE, 3), dtype=np.uint8)


RAW_OPTIONS = {"video_size": f"{SIZE}x{SIZE}", "pixel_format": "rgb24"}


@contextlib.contextmanager
def piped(data: bytes, hold_open: bool = False) -> Iterator[tuple[str, threading.Event]]:
    """``pipe:N`` of a real pipe a thread writes ``data`` into, then closes, or with
    ``hold_open`` keeps open (a writer gone quiet) until the event it gives is set."""
    read_end, write_end = os.pipe()
    release = threading.Event()

    def write() -> None:
        with contextlib.suppress(OSError), os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
            pipe.flush()
            if hold_open:
                release.wait(60)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield f"pipe:{read_end}", release
    finally:
        release.set()
        writer.join(10)
        with contextlib.suppress(OSError):
            os.close(read_end)


def dropping(served: int) -> type[Quiet]:
    """A camera that drops: each of the first ``served`` connections (the header's read
    included) is sent the first half of the stream, then closed; later ones get a 404."""
    count = {"connections": 0}
    lock = threading.Lock()

    class Dropping(Quiet):
        def do_GET(self) -> None:
            with lock:
                count["connections"] += 1
                number = count["connections"]
            if number > served:
                self.send_error(404, "camera offline")
                return
            data = self.server.payload  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Type", "video/mp2t")
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(data[: len(data) // 2])
            self.close_connection = True

    return Dropping
