"""Mutation operators for generated SWE tasks: one small bug per mutant, written as an edit of the exact token span.

`find_mutations(source)` lists every site inside a function body where one operator applies, in source order.
`apply_mutation(source, m)` replaces just that span, so a mutant's diff is one line (a multi-line `if` test negated
with parentheses excepted) and everything else in the file, comments and formatting included, stays byte-identical.
`ast.unparse` is never used: it would reformat the whole function and give the bug away in the diff.

Operators (names as in a task row's `mutation.operator`):
- `compare_flip`: `<` <-> `>=`, `<=` <-> `>`, `==` <-> `!=`, `in` <-> `not in`, `is` <-> `is not`;
- `arith_swap`: `+` <-> `-` (also `+=` <-> `-=`);
- `bool_swap`: `and` <-> `or`;
- `const_inc`: an integer literal n -> n + 1 (never a bool);
- `if_negate` / `if_unnegate`: `if x:` -> `if not x:` (parenthesised where precedence needs it), `if not x:` -> `if x:`;
- `return_none`: `return <expr>` -> `return None` (single-line expressions only).

Only code inside function bodies is mutated (module and class bodies run at import, where a bug breaks everything
and no test names it), never decorators, defaults or annotations, and never inside f-strings (their parts' positions
are unreliable before Python 3.12). Every mutant returned by `mutants` compiles.
"""

from __future__ import annotations

import ast
import bisect
import io
import random
import tokenize
from dataclasses import dataclass

__all__ = ["OPERATORS", "Mutation", "apply_mutation", "find_mutations", "mutants", "shuffled"]

OPERATORS = ("compare_flip", "arith_swap", "bool_swap", "const_inc", "if_negate", "if_unnegate", "return_none")

_FLIP = {
    ast.Lt: ">=",
    ast.GtE: "<",
    ast.LtE: ">",
    ast.Gt: "<=",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.In: "not in",
    ast.NotIn: "in",
    ast.Is: "is not",
    ast.IsNot: "is",
}
_TEXT = {
    ast.Lt: "<",
    ast.GtE: ">=",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_ARITH = {"+": "-", "-": "+", "+=": "-=", "-=": "+="}
# `not` binds looser than these, so `not <test>` would negate only their first operand: wrap them.
_NEEDS_PARENS = (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda, ast.Yield, ast.YieldFrom)
_SKIP_TOKENS = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


@dataclass(frozen=True)
class Mutation:
    operator: str
    start: int  # character offsets into the source: the span [start, end) is replaced by `new`
    end: int
    old: str
    new: str
    line: int  # 1-based line of the edit
    stmt_line: int  # first line of the enclosing statement (the line coverage reports)
    function: str  # qualified name of the enclosing function
    function_lines: tuple[int, int]  # its first and last line


class _Source:
    """Offsets in one source text: AST positions (UTF-8 byte columns) and tokens (character columns)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        self.tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _SKIP_TOKENS]
        self.token_starts = [self.offset(*t.start) for t in self.tokens]

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def node_span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self._byte_offset(node.lineno, node.col_offset),
            self._byte_offset(node.end_lineno, node.end_col_offset),
        )

    def _byte_offset(self, line: int, byte_col: int) -> int:
        begin = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return begin + len(self.text[begin:end].encode()[:byte_col].decode(errors="ignore"))

    def tokens_between(self, start: int, end: int) -> list[tuple[int, int, str]]:
        """(start, end, string) of the tokens inside [start, end), parentheses left out."""
        found = []
        for i in range(bisect.bisect_left(self.token_starts, start), len(self.tokens)):
            token = self.tokens[i]
            t_start, t_end = self.token_starts[i], self.offset(*token.end)
            if t_end > end:
                break
            if token.string not in ("(", ")"):
                found.append((t_start, t_end, token.string))
        return found

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


def find_mutations(source: str) -> list[Mutation]:
    """Every mutation site in the function bodies of `source`, in a stable order (position, then operator)."""
    try:
        tree = ast.parse(source)
        src = _Source(source)
    except (SyntaxError, tokenize.TokenError, ValueError):
        return []
    sites: list[Mutation] = []
    for function, qualname in _functions(tree):
        for stmt in function.body:
            for node, stmt_line in _nodes(stmt):
                for operator, start, end, new in _sites(node, src):
                    sites.append(
                        Mutation(
                            operator,
                            start,
                            end,
                            source[start:end],
                            new,
                            src.line_of(start),
                            stmt_line,
                            qualname,
                            (function.lineno, function.end_lineno),
                        )
                    )
    unique = {(m.start, m.end, m.new): m for m in sites}  # a nested function is walked once, as itself
    return sorted(unique.values(), key=lambda m: (m.start, m.end, m.operator, m.new))


def _functions(tree: ast.AST, prefix: str = ""):
    """(function node, qualified name) of every function, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, prefix + node.name
            yield from _functions(node, f"{prefix}{node.name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _nodes(stmt: ast.stmt):
    """(node, first line of its statement) under a statement of a function body, not entering nested definitions
    (they are walked as functions of their own), f-strings or annotations."""
    stack = [(stmt, stmt.lineno)]
    while stack:
        node, stmt_line = stack.pop()
        yield node, stmt_line
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.JoinedStr)):
                continue
            if isinstance(node, (ast.AnnAssign, ast.arg)) and child is getattr(node, "annotation", None):
                continue
            stack.append((child, child.lineno if isinstance(child, ast.stmt) else stmt_line))


def _sites(node: ast.AST, src: _Source):
    """(operator, start, end, new text) for each way one operator applies at `node`."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            before = node.left if i == 0 else node.comparators[i - 1]
            span = _operator_span(src, before, node.comparators[i], _TEXT[type(op)])
            if span:
                yield ("compare_flip", *span, _FLIP[type(op)])
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        span = _operator_span(src, node.left, node.right, "+" if isinstance(node.op, ast.Add) else "-")
        if span:
            yield ("arith_swap", *span, _ARITH[src.text[span[0] : span[1]]])
    elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
        span = _operator_span(src, node.target, node.value, "+=" if isinstance(node.op, ast.Add) else "-=")
        if span:
            yield ("arith_swap", *span, _ARITH[src.text[span[0] : span[1]]])
    elif isinstance(node, ast.BoolOp):
        word = "and" if isinstance(node.op, ast.And) else "or"
        for before, after in zip(node.values, node.values[1:], strict=False):
            span = _operator_span(src, before, after, word)
            if span:
                yield ("bool_swap", *span, "or" if word == "and" else "and")
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        start, end = src.node_span(node)
        if _literal(src.text[start:end]) == node.value:
            prefix = src.text[start : start + 2].lower()  # keep the literal's base: 0x1f -> 0x20
            formats = {"0x": hex, "0o": oct, "0b": bin}
            yield ("const_inc", start, end, formats.get(prefix, str)(node.value + 1))
    elif isinstance(node, ast.If):
        yield from _if_sites(node.test, src)
    elif isinstance(node, ast.Return) and node.value is not None and node.value.lineno == node.value.end_lineno:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield ("return_none", *src.node_span(node.value), "None")


def _operator_span(src: _Source, before: ast.AST, after: ast.AST, expected: str) -> tuple[int, int] | None:
    """The span of the operator token(s) between two operands, if they read `expected` (e.g. `not in`)."""
    tokens = src.tokens_between(src.node_span(before)[1], src.node_span(after)[0])
    if not tokens or " ".join(t[2] for t in tokens) != expected:
        return None
    return tokens[0][0], tokens[-1][1]


def _if_sites(test: ast.expr, src: _Source):
    start, end = src.node_span(test)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        # drop the `not` and the blanks after it, keeping any parenthesis: `not(x)` -> `(x)`
        cut = start + len("not")
        while src.text[cut] in " \t":
            cut += 1
        yield ("if_unnegate", start, cut, "")
        return
    text = src.text[start:end]
    yield ("if_negate", start, end, f"not ({text})" if isinstance(test, _NEEDS_PARENS) else f"not {text}")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None


def apply_mutation(source: str, mutation: Mutation) -> str:
    if source[mutation.start : mutation.end] != mutation.old:
        raise ValueError(f"the source does not hold {mutation.old!r} at {mutation.start}: a different file?")
    return source[: mutation.start] + mutation.new + source[mutation.end :]


def mutants(source: str, filename: str = "<mutant>") -> list[tuple[Mutation, str]]:
    """(mutation, mutated source) for every site whose mutant compiles, in `find_mutations`'s order."""
    found = []
    for mutation in find_mutations(source):
        text = apply_mutation(source, mutation)
        try:
            compile(text, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        found.append((mutation, text))
    return found


def shuffled(items: list, seed: int | str, key=lambda item: item) -> list:
    """`items` in a seeded order that alternates between operators (`key(item)` gives an item's Mutation), so that a
    short prefix of it is not all integer constants, the most common site."""
    rng = random.Random(seed)
    by_operator: dict[str, list] = {}
    for item in items:
        by_operator.setdefault(key(item).operator, []).append(item)
    queues = [by_operator[name] for name in OPERATORS if name in by_operator]
    for queue in queues:
        rng.shuffle(queue)
    order = []
    while queues:
        rng.shuffle(queues)
        for queue in queues:
            order.append(queue.pop())
        queues = [q for q in queues if q]
    return order
