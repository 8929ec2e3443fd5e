"""The egglog program that moves a batch into the e-graph and out again: the `load` rules that make the rows of
LN (every node of a batch) into terms, the `collect` rules that pack the roots with their intervals for one
extraction, and the `clear` rule set that deletes a batch's rows before the next (rewrite.egraph's Saturator
runs them). No egglog import here: this is program text.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewrite.egraph_terms import CTORS, POW2_TWINS, iv_pack

# how a batch gets into the e-graph: rows of relations read with `input`, made into terms by the `load` rules.
# N i is the e-class of node number i (unextractable). LN holds every node, so one `input` per batch loads
# them all: (id, constructor code, operand numbers, key, lo, hi, has-interval); a constant has code 0 and its
# value as first operand, a leaf code -1 and its key. A node with has-interval 1 comes with its interval (a
# leaf its box, a constant its value, an op node what the fast tier's analysis gives), which the e-graph's own
# analysis only tightens, so its first run over new nodes finds little to change. LR holds the roots of one
# packed list (pack, position, id; id -1 ends the list). `collect` makes the list PK p 0 of PB (root, packed
# interval, rest) or, for a root without an interval, the dearer PC (root, rest): one extraction gives every root
# and its interval.
CODES: dict[str, int] = {"Num": 0, **{c: i + 1 for i, (c, _, _) in enumerate(CTORS.values())}}
# a Div or Mod by a positive power of two comes with the code of its extraction twin and is loaded as both
TWIN_CODES: dict[str, int] = {of: len(CODES) + j for j, of in enumerate(POW2_TWINS.values())}
TWIN_OF: dict[str, str] = {of: twin for twin, of in POW2_TWINS.items()}
TABLES = frozenset([c for c, _, _ in CTORS.values()] + list(POW2_TWINS))  # the op constructors' tables
CTOR_NAMES = frozenset({"Num", "Var", *(c for c, _, _ in CTORS.values()), *POW2_TWINS})
# a row of LN or LR is deleted by the rule that consumes it, so those relations stay empty between batches (every
# `run` of `load` would otherwise look up the new rows' codes in an index over all rows since the last reset)
def _del_ln(code: int, a: str = "a") -> str:
    return f"(delete (LN i {code} {a} b d k l h f))"


def _load_set(name: str) -> str:
    """The rule set of the load rule for node kind `name` (Var, Num, a constructor or a twin; `bounds` for the
    intervals): one rule set each, so that a batch runs only the load rules of the kinds it has (`load_sets`)."""
    return f"load__{name.lower()}"


_LOAD_KINDS = ("bounds", "Var", "Num", *(c for c, _, _ in CTORS.values()), *POW2_TWINS)


def load_sets(kinds: set[str]) -> tuple[str, ...]:
    """The load rule sets a batch whose nodes are of `kinds` needs (a Div or Mod may come as its twin's code)."""
    names = {"bounds", *kinds, *(TWIN_OF[k] for k in kinds if k in TWIN_OF)}
    return tuple(_load_set(k) for k in _LOAD_KINDS if k in names)


LOAD_PROGRAM = "\n".join([
    "(constructor N (i64) Idx :unextractable)",
    "(relation LN (i64 i64 i64 i64 i64 String i64 i64 i64))",
    "(relation LR (i64 i64 i64))",
    "(constructor PK (i64 i64) PList :unextractable)",
    "(constructor PB (Idx i64 PList) PList)",
    "(constructor PC (Idx PList) PList :cost 1000000)",
    *(f"(ruleset {_load_set(k)})" for k in _LOAD_KINDS),
    f"(unstable-combined-ruleset load {' '.join(_load_set(k) for k in _LOAD_KINDS)})",
    "(ruleset collect)",
    f'(rule ((LN i -1 a b d k l h f)) ((union (N i) (Var k l h)) {_del_ln(-1)}) :ruleset {_load_set("Var")}'
    ' :name "load-var")',
    f'(rule ((LN i 0 v b d k l h f)) ((union (N i) (Num v)) {_del_ln(0, "v")})'
    f' :ruleset {_load_set("Num")} :name "load-num")',
    f'(rule ((LN i c a b d k l h 1) (= __iv {iv_pack("l", "h")})) ((set (iv (N i)) __iv))'
    f' :ruleset {_load_set("bounds")} :name "load-bounds")',
    *(f'(rule ((LN i {CODES[c]} a b d k l h f)) ((union (N i) ({c} {" ".join(f"(N {v})" for v in "abd"[:len(k)])}))'
      f' {_del_ln(CODES[c])}) :ruleset {_load_set(c)} :name "load-{c.lower()}")' for c, k, _ in CTORS.values()),
    *(f'(rule ((LN i {TWIN_CODES[of]} a b d k l h f)) ((union (N i) ({of} (N a) (N b)))'
      f' (union (N i) ({twin} (N a) (N b))) {_del_ln(TWIN_CODES[of])}) :ruleset {_load_set(twin)}'
      f' :name "load-{twin.lower()}")' for twin, of in POW2_TWINS.items()),
    "(rule ((LR p j i) (= e (N i)) (= v (iv e))) ((union (PK p j) (PB e v (PK p (+ j 1))))"
    ' (delete (LR p j i))) :ruleset collect :name "collect")',
    '(rule ((LR p j i) (= e (N i))) ((union (PK p j) (PC e (PK p (+ j 1)))) (delete (LR p j i)))'
    ' :ruleset collect :name "collect-pc")',
    '(rule ((LR p j i) (= i -1)) ((union (PK p j) (PNil)) (delete (LR p j i))) :ruleset collect :name "collect-end")',
]) + "\n"

# `clear`: one run deletes every row of the sort's tables, the loader's and the packed lists', and the interval
# functions', so the next batch starts from an e-graph that holds the rules alone, as after `(pop)` `(push)` (~0.1 ms
# against ~0.9 for those two). Rows a rule subsumed cannot be matched, so they stay; they hold e-classes no later
# node can reach (a new node's children are new e-classes, a constant or a leaf gets a new e-class once its old row
# is gone), and the full reset every `Schedule.reset_nodes` loaded nodes bounds them and egglog's union-find.
_CLEAR_ROWS = ("(Num a)", "(Var a b c)", *(f"({c} {' '.join('abd'[:len(k)])})" for c, k, _ in CTORS.values()),
               *(f"({t} a b)" for t in POW2_TWINS), "(N a)", "(PK a b)", "(PB a b c)", "(PC a b)", "(PNil)",
               "(PCons a b)")


def clear_program(functions: Sequence[str]) -> str:
    """The `clear` rule set: one rule per table that deletes its rows (`functions`: the interval lattice's)."""
    rows = [*_CLEAR_ROWS, *(f"({f} e)" for f in functions)]
    return "(ruleset clear)\n" + "".join(f"(rule ((= __v {r})) ((delete {r})) :ruleset clear :name \"clear-{i}\")\n"
                                         for i, r in enumerate(rows))


__all__ = ["CODES", "CTOR_NAMES", "LOAD_PROGRAM", "TABLES", "TWIN_CODES", "TWIN_OF", "clear_program", "load_sets"]
