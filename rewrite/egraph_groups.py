"""The interval analysis of a rule program cut into groups by the constructors its rules match, so that a batch
runs only the rules that can fire on its own e-classes (rewrite.egraph picks them per batch).

Why: egglog 13.2 pays for every rule of a `run` that has new rows in one of its tables, matched or not, and the
analysis is run once per pass of its saturation (3-6 passes for a small expression). The `iv` table changes
in every pass, so each interval rule is paid in each pass as soon as its constructor has any row in the e-graph:
in a persistent e-graph, after a few batches, that is every rule.

What makes skipping a rule exact for a batch. Call `core` the constructors named by the rewrite rules (in their
queries or actions) and `Num` and `Var`. An e-class of the batch (one of its nodes' e-classes, or one a rule made
from them) holds only nodes of the batch's own constructors or of `core`: the rewrite rules union their matched
node with terms of `core` constructors, congruence unions nodes of one constructor, and the analysis's only
unions are a point interval with its `Num` (an e-class whose cheapest term is that `Num` whatever else it holds,
and whose interval cannot change) and a division or modulo with its extraction twin. So an interval rule whose
query names a constructor outside `core` and outside the batch matches no node of the batch's e-classes: it can
change neither the batch's intervals nor its extraction. Rules skipped by a batch see their rows later: egglog's
semi-naive evaluation gives a rule every row added since its own last run, so the first batch that runs it again
brings those e-classes up to date.

A program whose rewrites name every constructor (the whole eqsat rule set) has one group, the whole analysis.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from rewrite.egglog_io import split_commands

_HEAD = re.compile(r"\(([A-Za-z][A-Za-z0-9_-]*)")
_RULESET = re.compile(r":ruleset\s+([A-Za-z0-9_-]+)")


def _query(rule: str) -> str:
    """The query of an egglog `(rule (query) (actions) ...)` form: its first parenthesized list."""
    start = rule.index("(", rule.index("rule") + 4)
    depth = 0
    for i in range(start, len(rule)):
        ch = rule[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return rule[start : i + 1]
    return rule[start:]


def _named(text: str, ctors: Collection[str]) -> set[str]:
    return {m.group(1) for m in _HEAD.finditer(text) if m.group(1) in ctors}


def split_analysis(program: str, analysis: str, rewrites: Sequence[str],
                   ctors: Collection[str]) -> tuple[str, dict[frozenset[str], str]]:
    """`program` with every rule of rule set `analysis` whose query names a constructor (of `ctors`) outside
    `core` moved to a rule set of its own group (the set of those constructors), declared next to `analysis`;
    and the group -> rule set name table. `core`: `Num`, `Var` and the constructors the rules of `rewrites` name."""
    forms = split_commands(program)
    core = {"Num", "Var"}
    for f in forms:
        m = _RULESET.search(f)
        if f.lstrip().startswith("(rule") and m is not None and m.group(1) in rewrites:
            core |= _named(f, ctors)
    groups: dict[frozenset[str], str] = {}
    out: list[str] = []
    decl_at = -1
    for f in forms:
        head = f.lstrip()
        if head.startswith("(ruleset") and head[len("(ruleset"):].strip(" )\n") == analysis:
            decl_at = len(out)
        m = _RULESET.search(f)
        if head.startswith("(rule") and m is not None and m.group(1) == analysis:
            key = frozenset(_named(_query(f), ctors) - core)
            if key:
                name = groups.setdefault(key, f"{analysis}__{'_'.join(sorted(key)).lower()}")
                f = f[: m.start(1)] + name + f[m.end(1):]
        out.append(f)
    if groups and decl_at >= 0:
        out[decl_at + 1 : decl_at + 1] = [f"(ruleset {name})" for name in groups.values()]
    elif groups:  # no declaration of `analysis` found: nothing to attach the groups to, leave the program whole
        return program, {}
    return "\n".join(out) + "\n", groups


def groups_for(groups: dict[frozenset[str], str], present: set[str] | frozenset[str]) -> tuple[str, ...]:
    """The rule sets of the groups whose constructors all occur in a batch (`present`), in a stable order."""
    return tuple(sorted(name for key, name in groups.items() if key <= present))


__all__ = ["groups_for", "split_analysis"]
