"""Reaching egglog: its compiled bindings, loaded cheaply, and egglog program text cut into the top-level forms that
are parsed one at a time (rewrite.egraph runs the e-graph through these)."""

from __future__ import annotations

import os
from typing import Any

_BINDINGS: list[Any] = []


def egglog_bindings() -> Any:
    """The `egglog.bindings` extension module, loaded without the `egglog` package around it when that is not
    imported yet. `import egglog` costs ~0.2 s (measured on 13.2: its DSL, pretty-printer, black and
    opentelemetry), the extension alone ~15 ms, and the bridge needs only the extension. It is registered
    under its own name, so a later `import egglog` finds and reuses it (a pyo3 module initializes only once
    per process). Any surprise (another layout, a loader error) falls back to the ordinary import."""
    if _BINDINGS:
        return _BINDINGS[0]
    import sys

    mod = sys.modules.get("egglog.bindings")
    if mod is None and "egglog" not in sys.modules:
        import importlib.machinery
        import importlib.util

        try:
            pkg = importlib.util.find_spec("egglog")
            for d in (pkg.submodule_search_locations or []) if pkg is not None else []:
                for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                    path = os.path.join(d, "bindings" + suffix)
                    if not os.path.exists(path):
                        continue
                    spec = importlib.util.spec_from_file_location("egglog.bindings", path)
                    if spec is None or spec.loader is None:
                        continue
                    m = importlib.util.module_from_spec(spec)
                    sys.modules["egglog.bindings"] = m
                    spec.loader.exec_module(m)
                    mod = m
                    break
                if mod is not None:
                    break
        except Exception:  # any failure here only means the ordinary import below
            sys.modules.pop("egglog.bindings", None)
            mod = None
    if mod is None:
        from egglog import bindings as mod
    _BINDINGS.append(mod)
    return mod


def split_commands(text: str) -> list[str]:
    """The top-level forms of egglog text. egglog 13.2 copies the whole source into every span it parses, so
    parsing a long program in one piece is quadratic (0.12 s instead of 5 ms for the eqsat rules)."""
    out, depth, start, in_str, comment = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if comment:
            comment = ch != "\n"
        elif in_str:
            in_str = ch != '"'
        elif ch == '"':
            in_str = True
        elif ch == ";":
            comment = True
        elif ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out


def parse_forms(eg: Any, text: str) -> list:
    """The commands of egglog program `text`, parsed by `eg` one top-level form at a time; a `run-schedule` of
    `run`, `saturate`, `seq` and `repeat` comes back as egglog's own schedule command (`core_schedule`)."""
    return [core_schedule(c) for form in split_commands(text) for c in eg.parse_program(form)]


def core_schedule(cmd: Any) -> Any:
    """`cmd`, or where it is a `run-schedule` that egglog's core schedules can say (`run` of a rule set, `saturate`,
    `seq`, `repeat`), the same schedule as a core `RunSchedule` command with spans that hold no source text.

    Why: egglog 13.2's parser gives `run-schedule` as the `UserDefined` command of egglog-experimental's scheduler,
    which runs the same schedule through the same rule runs, but the bindings convert every command from its Python
    object on each `run_program`, trying the variants of their command type in order, and a failed try costs a
    formatted error: `UserDefined` is the last of 27 and its schedule is a tree of expressions (each `Call` the third
    of three), where `RunSchedule` is the tenth; the spans of parsed forms also carry the whole form's text, copied
    on each conversion. Measured (callgrind) on the fast tier's per-expression saturation: ~0.14 M instructions
    less per expression, of ~7.0 M (2%)."""
    b = egglog_bindings()
    if type(cmd).__name__ != "UserDefined" or cmd.name != "run-schedule":
        return cmd
    sp = b.PanicSpan()

    def sched(e: Any) -> Any:
        kind, args = type(e).__name__, getattr(e, "args", None)
        if kind != "Call" or not args:
            raise ValueError
        if e.name == "run" and len(args) == 1 and type(args[0]).__name__ == "Var":
            return b.Run(sp, b.RunConfig(args[0].name))
        if e.name == "saturate":
            return b.Saturate(sp, seq(args))
        if e.name == "seq":
            return seq(args)
        if e.name == "repeat" and type(args[0]).__name__ == "Lit" and len(args) > 1:
            return b.Repeat(sp, args[0].value.value, seq(args[1:]))
        raise ValueError

    def seq(args: list) -> Any:
        return sched(args[0]) if len(args) == 1 else b.Sequence(sp, [sched(a) for a in args])

    try:
        return b.RunSchedule(seq(cmd.args))
    except (ValueError, AttributeError, TypeError):  # a schedule only egglog-experimental's scheduler can run
        return cmd
