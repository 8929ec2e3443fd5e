"""The viewer: record what the compiler did and show it as a local web page (docs/viz.md).

    VIZ=1 python prog.py                    # at exit: write the trace, serve it, print the URL on stderr
    VIZ=1 VIZ_OUT=trace.json python prog.py # at exit: only write the trace
    python -m rewrite.viz trace.json        # serve a written trace

    with recording() as rec:                # in a program or a test
        ...
    data = rec.to_json()

What is recorded (rewrite.viz.capture): every rule firing (the engine's trace log), every pipeline stage's graph
before and after with the firings it made, per kernel the opts, LINEAR listing, rendered source, work estimate
and measured run times, and for each tensor-graph node the Tensor call that created it. The engine records
firings; the layers above report stages and kernels through the `Recorder` that `active()` returns (None when
VIZ is off, the only check they pay). Serialization (rewrite.viz.serialize) and the server (rewrite.viz.server)
are imported only when used.
"""

from rewrite.viz.capture import Recorder, active, recording, start

__all__ = ["Recorder", "active", "recording", "start"]
