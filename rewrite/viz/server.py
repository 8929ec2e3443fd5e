"""The viewer's server: the standard library's threading HTTP server, on localhost.

`/` is the page (rewrite/viz/static, package data), `/trace.json` the trace it shows. `serve(path)` starts a
server in a background thread and returns it with its URL (tests use port 0); `serve_forever(path)` serves in
the foreground until Ctrl-C, printing the URL on stderr and opening a browser when the machine has a display.
"""

from __future__ import annotations

import http.server
import os
import sys
import threading
from functools import partial

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".json": "application/json"}


class _Handler(http.server.BaseHTTPRequestHandler):
    def __init__(self, *args: object, trace_path: str, **kw: object) -> None:
        self.trace_path = trace_path
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def do_GET(self) -> None:  # the http.server spelling
        name = self.path.split("?", 1)[0].lstrip("/") or "index.html"
        if name == "trace.json":
            path = self.trace_path
        elif "/" not in name and os.path.isfile(os.path.join(STATIC, name)):
            path = os.path.join(STATIC, name)
        else:
            self.send_error(404, f"no {name!r} here: the viewer serves /, its files and /trace.json")
            return
        with open(path, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Type", _TYPES.get(os.path.splitext(path)[1], "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet: one line per request is noise
        pass


def serve(trace_path: str, host: str = "127.0.0.1", port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A server for `trace_path`, running in a daemon thread; returns it (call .shutdown()) and its URL."""
    if not os.path.isfile(trace_path):
        raise FileNotFoundError(f"viz: no trace at {trace_path!r}; write one with VIZ=1 VIZ_OUT={trace_path} ...")
    srv = http.server.ThreadingHTTPServer((host, port), partial(_Handler, trace_path=trace_path))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://{host}:{srv.server_address[1]}/"


def _has_display() -> bool:
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def serve_forever(trace_path: str, host: str = "127.0.0.1", port: int = 8000, open_browser: bool = True) -> None:
    try:
        srv, url = serve(trace_path, host, port)
    except OSError:  # the port is taken: any free one
        srv, url = serve(trace_path, host, 0)
    sys.stderr.write(f"VIZ: serving {trace_path} at {url} (Ctrl-C to stop)\n")
    if open_browser and _has_display():
        import webbrowser

        webbrowser.open(url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.shutdown()
