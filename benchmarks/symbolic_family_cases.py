"""Simplification families of issue 14 as a table: (family, expression, variable boxes, expected).

`expected` is either an int, the most unique nodes (variables and ranges as leaves, as the benchmark counts
them) the full simplifier (`UOp.simplify`) may leave, or a str, the exact rendering it must produce. The
expressions are written in operations tinygrad's UOp has too (negation as `*-1`), so the `symbolic` benchmark
can run tinygrad's simplifier on the same table. Boxes: `a=-20:20` is a variable in [-20, 20], `r1=R8` a RANGE
over [0, 8). tests/rules/test_families.py checks every row by brute force over the boxes.
"""

from __future__ import annotations

from rewrite.uop import UOp

# fmt: off
CASES: list[tuple[str, str, str, int | str]] = [
    # nested floor division by constants, either sign, and a constant added afterwards
    ("nested-div", "((a//2)+1)//2",                 "a=-20:20",         "((a+2)//4)"),
    ("nested-div", "((a//3)+2)//4",                 "a=-40:40",         "((a+6)//12)"),
    ("nested-div", "((a//-2)+1)//2",                "a=-20:20",         "((a+-2)//-4)"),
    ("nested-div", "((a//-3)+-1)//5",               "a=-40:40",         "((a+3)//-15)"),
    ("nested-div", "((a//-2)+1)//-2",               "a=-20:20",         5),
    ("nested-div", "(a//-2)//-3",                   "a=-30:30",         "((a+1)//6)"),
    ("nested-div", "((a//-4)+3)//-2",               "a=-40:40",         5),
    ("nested-div", "((a//2)+1)//2 + 3",             "a=-20:20",         "((a+14)//4)"),
    ("nested-div", "((a//2)+1)//2 + -1",            "a=-20:20",         5),
    ("nested-div", "((a//-2)+1)//2 + 5",            "a=-20:20",         5),
    ("nested-div", "(((a//2)+1)//2+1)//2",          "a=-30:30",         "((a+6)//8)"),
    ("nested-div", "((a*3+b)//2+1)//3",             "a=0:9 b=0:9",      10),
    ("nested-div", "((r1//2)+1)//2",                "r1=R16",           "((r1+2)//4)"),
    # gcd through a symbolic divisor
    ("symbolic-gcd", "(a*3 + b*9) // (d*3)",        "a=0:20 b=0:9 d=1:5",  "((a+(b*3))//d)"),
    ("symbolic-gcd", "(a*4 + b*6) // (d*2)",        "a=0:20 b=0:9 d=1:5",  "(((a*2)+(b*3))//d)"),
    ("symbolic-gcd", "(a*6 + 12) // (d*3)",         "a=-9:9 d=1:5",        "(((a+2)*2)//d)"),
    ("symbolic-gcd", "(a*6 + b*4) % (d*2)",         "a=0:9 b=0:9 d=1:5",   "((((a*3)+(b*2))%d)*2)"),
    ("symbolic-gcd", "(a*5 + b*10) // (d*-5)",      "a=-9:9 b=0:9 d=1:4",  9),
    ("symbolic-gcd", "(a*4 + b*2 + 6) // (d*2)",    "a=0:9 b=0:9 d=1:4",   9),
    ("symbolic-gcd", "(a*6 + b*3) // (d*9)",        "a=0:9 b=0:9 d=1:4",   11),
    ("symbolic-gcd", "(a*2*d) // (d*2)",            "a=-9:9 d=1:4",        "a"),
    # div/mod recombination across digits
    ("recombine", "(x%4)*3 + ((x//4)%2)*12",        "x=0:100",          "((x%8)*3)"),
    ("recombine", "((x//2)%4)*2 + x%2",             "x=0:100",          "(x%8)"),
    ("recombine", "x%2 + ((x//2)%4)*2",             "x=-50:50",         "(x%8)"),
    ("recombine", "((x//2)%4)*2 + x%2 + ((x//8)%2)*8", "x=0:100",       "(x%16)"),
    ("recombine", "(x%3)*5 + ((x//3)%4)*15 + ((x//12)%2)*60", "x=0:200", "((x%24)*5)"),
    ("recombine", "x%-3 + ((x//-3)%5)*-3",          "x=-60:60",         "(x%-15)"),
    ("recombine", "((x//4)%3)*4 + x%4",             "x=-50:50",         "(x%12)"),
    ("recombine", "((r1//3)%2)*3 + r1%3",           "r1=R64",           "(r1%6)"),
    ("recombine", "((x//2)%4)*2 + x%2 + y",         "x=0:100 y=0:9",    "((x%8)+y)"),
    ("recombine", "((x//4)%2)*4 + x%4 + (x//8)*8",  "x=0:100",          "x"),
    # a constant added to a floor division with a negated index, merged into the division
    ("neg-div-const", "(a*-1)//4 + 1",              "a=-20:20",         7),
    ("neg-div-const", "(a*-1 + 3)//4 + 2",          "a=-20:20",         "(((a*-1)+11)//4)"),
    ("neg-div-const", "(a*-1 + 7)//4 + -1",         "a=-20:20",         "(((a*-1)+3)//4)"),
    ("neg-div-const", "(r1*-1 + 15)//4 + 1",        "r1=R16",           "(((r1*-1)+19)//4)"),
    ("neg-div-const", "(a*-2 + b + 5)//3 + 2",      "a=0:9 b=0:9",      11),
    ("neg-div-const", "(a*-1 + -1)//-3 + 1",        "a=-20:20",         7),
    # comparisons: negation on both sides, two comparisons on one variable
    ("comparisons", "(a*-1) < (b*-1)",              "a=-9:9 b=-9:9",    "(b<a)"),
    ("comparisons", "(a*-2) < (b*-2)",              "a=-9:9 b=-9:9",    "(b<a)"),
    ("comparisons", "(a*-1 + 3) < (b*-1)",          "a=-9:9 b=-9:9",    5),
    ("comparisons", "(a < 10) | (9 < a)",           "a=-20:20",         "True"),
    ("comparisons", "(a < 10) & (9 < a)",           "a=-20:20",         "False"),
    ("comparisons", "(a < 3) | (1 < a)",            "a=-20:20",         "True"),
    ("comparisons", "(a < 3) & (5 < a)",            "a=-20:20",         "False"),
    ("comparisons", "(5 < a) & (a < 3)",            "a=-20:20",         "False"),
    ("comparisons", "(a < 4) & (2 < a)",            "a=-20:20",         6),
    ("comparisons", "(a.ne(3)) | (a < 5)",          "a=-20:20",         "True"),
    ("comparisons", "(a.ne(3)) & (a < 3)",          "a=-20:20",         "(a<3)"),
    ("comparisons", "(a < 10) | (b < 3) | (9 < a)", "a=-20:20 b=0:9",   "True"),
    # where: max, summed complementary branches, closure folding
    ("where", "(x < 0).where(0, x)",                "x=-9:9",           "max(x, 0)"),
    ("where", "(x < 0).where(x, 0)",                "x=-9:9",           5),
    ("where", "(x < 3).where(3, x)",                "x=-9:9",           "max(x, 3)"),
    ("where", "(0 < x).where(x, 0)",                "x=-9:9",           "max(x, 0)"),
    ("where", "(c < 5).where(a, 0) + (c < 5).where(0, b)",  "a=0:9 b=0:9 c=0:9", "((c<5) ? a : b)"),
    ("where", "(c < 5).where(a, 0) + (c < 5).where(0, a*2)", "a=0:9 c=0:9", 7),
    ("where", "(c < 5).where((c < 5).where(a, b), b)",       "a=0:9 b=0:9 c=0:9", "((c<5) ? a : b)"),
    ("where", "(c < 5).where((c < 7).where(a, b), b)",       "a=0:9 b=0:9 c=0:9", "((c<5) ? a : b)"),
    ("where", "(c < 5).where(a, (c < 3).where(b, a))",       "a=0:9 b=0:9 c=0:9", "a"),
    ("where", "(c < 5).where(a + (c < 5).where(b, 1), 2)",   "a=0:9 b=0:9 c=0:9", "((c<5) ? (a+b) : 2)"),
    ("where", "(c < 5).where(a * (c < 8).where(b, 3), 0)",   "a=0:9 b=0:9 c=0:9", "((c<5) ? (a*b) : 0)"),
    ("where", "(c < 5).where((a < 3).where((c < 5).where(a, b), 4), 0)", "a=0:9 b=0:9 c=0:9",
     "((c<5) ? ((a<3) ? a : 4) : 0)"),
    ("where", "(c < 5).where(a, (4 < c).where(b, a))",       "a=0:9 b=0:9 c=0:9", "((c<5) ? a : b)"),
    # a value less its remainder (or its rounded-down part): only the e-graph has these two-way forms, and
    # their exact interval decides comparisons the term-by-term interval cannot
    ("remainder", "x + (x%4)*-1",                   "x=0:100",          "((x//4)*4)"),
    ("remainder", "x + (x//4)*-4",                  "x=0:100",          "(x%4)"),
    ("remainder", "x%4 + x*-1",                     "x=0:100",          "((x//4)*-4)"),
    ("remainder", "(r1*4) + ((r1*4)%8)*-1",         "r1=R16",           "((r1//2)*8)"),
    ("remainder", "(x + (x%4)*-1) < 0",             "x=0:100",          "False"),
    ("remainder", "(x + (x//4)*-4) < 4",            "x=-50:50",         "True"),
    # xor identities, bool and int
    ("xor", "(p ^ q) ^ q",                          "p=B q=B",          "p"),
    ("xor", "q ^ (p ^ q)",                          "p=B q=B",          "p"),
    ("xor", "(a ^ 5) ^ 5",                          "a=0:15",           "a"),
    ("xor", "(a ^ 5) ^ 3",                          "a=0:15",           "(a^6)"),
    ("xor", "(a ^ b) ^ b",                          "a=0:15 b=0:15",    "a"),
    ("xor", "(a ^ a)",                              "a=0:15",           "0"),
    ("xor", "(a & 0) ^ a",                          "a=0:15",           "a"),
    ("xor", "(a | 0) ^ (a & -1)",                   "a=-8:15",          "0"),
    ("xor", "p ^ True ^ True",                      "p=B",              "p"),
    ("xor", "(p ^ q) & (p ^ q)",                    "p=B q=B",          3),
    ("xor", "(a & 7) ^ (a & 7)",                    "a=0:15",           "0"),
    ("xor", "(a ^ 0) | 0",                          "a=0:15",           "a"),
]
# fmt: on

FAMILIES = tuple(dict.fromkeys(c[0] for c in CASES))


def build(expr: str, boxes: str) -> UOp:
    """The expression over fresh variables: `a=lo:hi` an index variable, `r3=R8` RANGE 3 over [0, 8),
    `p=B` a bool variable."""
    from rewrite.dtype import dtypes

    env: dict[str, object] = {}
    for b in boxes.split():
        name, box = b.split("=")
        if box == "B":
            env[name] = UOp.variable(name, 0, 1, dtypes.bool)
        elif box.startswith("R"):
            env[name] = UOp.range(int(box[1:]), int(name[1:]))
        else:
            lo, hi = map(int, box.split(":"))
            env[name] = UOp.variable(name, lo, hi)
    return eval(expr, env)  # the table above, never user input
