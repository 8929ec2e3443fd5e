"""`python -m rewrite.viz trace.json [--port N] [--host H] [--no-browser]`: serve a trace written by VIZ=1."""

from __future__ import annotations

import argparse

from rewrite.viz.server import serve_forever


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rewrite.viz", description="Serve a uopc trace (VIZ=1) as a web page.")
    p.add_argument("trace", help="a trace file written by VIZ=1 (VIZ_OUT=path)")
    p.add_argument("--port", type=int, default=8000, help="port to serve on (taken: any free one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    a = p.parse_args(argv)
    serve_forever(a.trace, a.host, a.port, open_browser=not a.no_browser)


if __name__ == "__main__":
    main()
