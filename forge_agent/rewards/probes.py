"""Tests split in two: a probe that runs beside the code under test, and checks kept outside.

The second reward principle (docs/rewards.md): no expected value is within reach of the code
being graded. `split_tests(source)` reads a test file with `ast` (never runs it) and rewrites
every assertion into a *probe*: `__probe__.check(ID, lambda: <expr>, ...)`, where the
probed expressions are the assertion's operands that call into the code (`candidate(3)`,
`str(Money(-150))`). Every other expression statement of a test (`account.deposit(...)`)
and the block of a `with self.assertRaises(...)` become probes of the same shape, and test
functions are renamed `test_<n>` in the program, so nothing there says where an exception
would pass (issue 61). The expected operands (literals: `[(1, 5)]`, `"-1.50 USD"`, a
tolerance, the polarity of `assertTrue`/`assertFalse`, the exception class `assertRaises`
wants) stay in a `Check` on the host. The probe program runs in the sandbox and reports the
values (`probe_runtime.Probe`, tagged JSON, size-bounded); `judge_test` decides each test
outside from those values.

What is split: `assert` statements and `self.assert*` calls (Equal, NotEqual, True, False,
Is, IsNot, IsNone, IsNotNone, In, NotIn, IsInstance, NotIsInstance, Greater(Equal),
Less(Equal), AlmostEqual, NotAlmostEqual, CountEqual, Regex, NotRegex, the sequence and dict
Equal forms, Raises and RaisesRegex as a `with` block or a call), and `self.fail`. An operand
is held outside when it is a literal (`ast.literal_eval`), so are the comparisons, `not`,
`and`/`or`, arithmetic and `abs`/`round`/`math.isclose` around it.

What cannot be split, and what happens to it:
- an assertion with no literal operand (`assertEqual(a.balance, Money(100))`, `assert f(x)
  == want` with `want` a variable): the comparison runs inside and its truth is reported. The
  verdict is still taken outside, but the expected value was in the graded process: the check
  is *exposed* (`Check.exposed`), counted per test (`SplitTests.exposed`) so a task's author
  can see it and rewrite it with a literal;
- an assertion in an expression (`lambda: self.assertEqual(...)`), another `assert*` method:
  left as it is (it raises inside); the test is counted as exposed too.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Check", "SplitTests", "probe_runtime_source", "split_tests"]

PROBE = "__probe__"

_COMPARE_METHODS = {
    "assertEqual": ast.Eq, "assertListEqual": ast.Eq, "assertTupleEqual": ast.Eq,
    "assertDictEqual": ast.Eq, "assertSetEqual": ast.Eq, "assertSequenceEqual": ast.Eq,
    "assertMultiLineEqual": ast.Eq, "assertNotEqual": ast.NotEq, "assertIs": ast.Is,
    "assertIsNot": ast.IsNot, "assertIn": ast.In, "assertNotIn": ast.NotIn,
    "assertGreater": ast.Gt, "assertGreaterEqual": ast.GtE, "assertLess": ast.Lt,
    "assertLessEqual": ast.LtE,
}  # fmt: skip
_ONE_ARG = {"assertTrue", "assertFalse", "assertIsNone", "assertIsNotNone"}
_SPECIAL = {
    "assertIsInstance", "assertNotIsInstance", "assertAlmostEqual", "assertNotAlmostEqual",
    "assertCountEqual", "assertRegex", "assertNotRegex", "assertRaises", "assertRaisesRegex",
    "fail",
}  # fmt: skip
_OUTSIDE_CALLS = {"abs": abs, "round": round, "math.fabs": math.fabs, "math.isclose": math.isclose,
                  "float": float, "int": int}  # fmt: skip
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%"}  # fmt: skip


@dataclass
class Check:
    """One assertion's outside half: a tree over the outcomes of its probed expressions
    (`("slot", i)` a value, `("truth", i)` its truth, `("raised", ...)` what the one
    expression raised, `("ran",)` a plain call that must not raise) and the literals it holds.
    How many times it must fire comes from the reference solution's run
    (`probe_verdicts.fired`); `must_run` is the fallback without one: it stands in its
    test's own body, so it runs when the test gets that far."""

    id: int
    line: int
    tree: tuple
    slots: int
    exposed: bool
    must_run: bool
    function: str  # the function it stands in ("" at module level)


@dataclass
class SplitTests:
    """A test file split: the probe program (no expected value in it) and its checks."""

    program: str
    checks: dict[int, Check] = field(default_factory=dict)
    unsplit: dict[str, int] = field(default_factory=dict)  # function -> assertions left inside
    renamed: dict[str, str] = field(default_factory=dict)  # test function -> its program name

    def exposed(self, function: str, fired: Mapping[int, int] | None = None) -> int:
        """How many of a test's assertions compare in the graded process. With `fired` (the
        checks the reference solution's run of the test fired, `probe_verdicts.fired`): every
        exposed check it reached, in a helper, a loop or an inherited method too; without,
        those written in `function`'s own body."""
        if fired is not None:
            return sum(self.checks[i].exposed for i in fired if i in self.checks)
        own = sum(c.exposed for c in self.checks.values() if c.function == function)
        return own + self.unsplit.get(function, 0)


def probe_runtime_source() -> str:
    """The recorder's source, to ship into the sandbox beside the probe program."""
    return (Path(__file__).parent / "probe_runtime.py").read_text()


def _literal(node: ast.AST) -> tuple[bool, Any]:
    if (  # float("inf"), float("nan")
        isinstance(node, ast.Call)
        and _dotted(node.func) == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and not node.keywords
        and str(node.args[0].value).strip().lower().lstrip("+-") in ("inf", "nan", "infinity")
    ):
        return True, float(node.args[0].value)
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Mult):
        # literal arithmetic of strings, bytes, lists and tuples (`"hello" + "-world"`,
        # `[0] * 3`): folded here, so the expected value stays a literal on the host
        (left_ok, left), (right_ok, right) = _literal(node.left), _literal(node.right)
        if left_ok and right_ok:
            try:
                return True, fold(_BINOPS[type(node.op)], left, right)
            except (TypeError, ValueError, OverflowError, MemoryError):
                pass
    return False, None


MAX_FOLDED = 1 << 20
"""The longest a string, bytes, list or tuple the host builds by `+` or `*` may be."""


def fold(op: str, a: object, b: object) -> Any:
    """`a + b` or `a * b` where one is a string, bytes, list or tuple, bounded by `MAX_FOLDED`
    (the host's own arithmetic on values it holds; numbers are not folded here). Raises
    TypeError for any other operands, ValueError past the bound."""
    sequences = (str, bytes, list, tuple)
    if op == "+" and isinstance(a, sequences) and type(a) is type(b):
        if len(a) + len(b) > MAX_FOLDED:
            raise ValueError("a folded value past its bound")
        return a + b
    if op == "*":
        seq, times = (a, b) if isinstance(a, sequences) else (b, a)
        if isinstance(seq, sequences) and type(times) is int and not isinstance(times, bool):
            if len(seq) * max(times, 0) > MAX_FOLDED:
                raise ValueError("a folded value past its bound")
            return seq * times
    raise TypeError("not a sequence operation")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Split:
    """Splits one assertion expression: `tree` outside, `leaves` probed inside."""

    def __init__(self) -> None:
        self.leaves: list[ast.expr] = []
        self.exposed = False

    def leaf(self, node: ast.expr, truth: bool = False) -> tuple:
        if any(isinstance(n, ast.Compare) for n in ast.walk(node)):
            self.exposed = True
        self.leaves.append(node)
        return ("truth" if truth else "slot", len(self.leaves) - 1)

    def split(self, node: ast.expr, truth: bool = False) -> tuple:
        is_literal, value = _literal(node)
        if is_literal:
            return ("lit", value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", self.split(node.operand, truth=True))
        if isinstance(node, ast.BoolOp):
            kind = "and" if isinstance(node.op, ast.And) else "or"
            return (kind, tuple(self.split(v, truth=True) for v in node.values))
        if self._holds_literal(node):
            if isinstance(node, ast.Compare):
                ops = tuple(type(op).__name__ for op in node.ops)
                rest = tuple(self.split(c) for c in node.comparators)
                return ("cmp", self.split(node.left), ops, rest)
            if isinstance(node, ast.BinOp):
                return (
                    "bin",
                    _BINOPS[type(node.op)],
                    self.split(node.left),
                    self.split(node.right),
                )
            if isinstance(node, ast.UnaryOp):
                return ("neg", self.split(node.operand))
            args = tuple(self.split(a) for a in node.args)
            kwargs = tuple((k.arg, self.split(k.value)) for k in node.keywords)
            return ("call", _dotted(node.func), args, kwargs)
        return self.leaf(node, truth)

    @staticmethod
    def _holds_literal(node: ast.expr) -> bool:
        """An operator the host can apply itself, with a literal (an expected value) among its
        direct operands: then it is taken apart and the literal stays outside."""
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            operands = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operands = [node.operand]
        elif isinstance(node, ast.Call) and _dotted(node.func) in _OUTSIDE_CALLS:
            if any(k.arg is None for k in node.keywords) or any(
                isinstance(a, ast.Starred) for a in node.args
            ):
                return False
            operands = [*node.args, *(k.value for k in node.keywords)]
        else:
            return False
        return any(_literal(o)[0] or _Split._holds_literal(o) for o in operands)


def _probe_call(
    method: str, args: list[ast.expr], keywords: Sequence[ast.keyword] = ()
) -> ast.Call:
    func = ast.Attribute(value=ast.Name(id=PROBE, ctx=ast.Load()), attr=method, ctx=ast.Load())
    return ast.Call(func=func, args=list(args), keywords=list(keywords))


def _method_call(node: ast.AST) -> tuple[str, list[ast.expr], dict[str, ast.expr]] | None:
    """(method, args, keywords) of a `self.assertX(...)` call, or None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    ):
        return None
    return node.func.attr, list(node.args), {k.arg: k.value for k in node.keywords}


def _names(node: ast.expr | None) -> tuple[str, ...] | None:
    """The class names an assertRaises/assertIsInstance wants (`ValueError`, `mod.Error`,
    a tuple of them), or None when it is not written as names."""
    if node is None:
        return None
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    names = [_dotted(n) for n in items]
    return None if None in names else tuple(n.rsplit(".", 1)[-1] for n in names)


def _assertion(method: str, args: list[ast.expr], kw: dict[str, ast.expr]) -> tuple | None:
    """(tree, leaves, exposed) of a `self.<method>(...)` assertion, or None to leave it."""
    split = _Split()
    if method in _COMPARE_METHODS and len(args) >= 2:
        compare = ast.Compare(left=args[0], ops=[_COMPARE_METHODS[method]()], comparators=[args[1]])
        tree = split.split(compare, truth=True)
    elif method in _ONE_ARG and args:
        if method in ("assertIsNone", "assertIsNotNone"):
            op = ast.Is() if method == "assertIsNone" else ast.IsNot()
            tree = split.split(
                ast.Compare(left=args[0], ops=[op], comparators=[ast.Constant(None)])
            )
        else:
            tree = split.split(args[0], truth=True)
            tree = tree if method == "assertTrue" else ("not", tree)
    elif method in ("assertIsInstance", "assertNotIsInstance") and len(args) >= 2:
        wanted = _names(args[1])
        if wanted is None:
            return None
        slot = split.leaf(args[0])
        tree = ("isinstance", slot[1], wanted, method == "assertNotIsInstance")
    elif method in ("assertAlmostEqual", "assertNotAlmostEqual") and len(args) >= 2:
        places, delta = (_literal(kw[k]) if k in kw else (True, None) for k in ("places", "delta"))
        if not (places[0] and delta[0]):
            return None
        pair = (split.split(args[0]), split.split(args[1]))
        tree = ("almost", *pair, places[1], delta[1], method == "assertNotAlmostEqual")
    elif method in ("assertCountEqual", "assertRegex", "assertNotRegex") and len(args) >= 2:
        if method != "assertCountEqual" and not _literal(args[1])[0]:
            return None  # a pattern the code computed: never run on the host
        tree = (method, split.split(args[0]), split.split(args[1]))
    elif method == "fail":
        tree = ("fail",)
    else:
        return None
    return tree, split.leaves, split.exposed


def _thunk(node: ast.expr) -> ast.Lambda:
    """`lambda: <node>`: the probe calls it, so raising or returning looks the same."""
    args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
    return ast.Lambda(args=args, body=node)


_FRAME_NAMES = {"super", "locals", "vars", "dir", "__class__"}


def _thunkable(node: ast.AST) -> bool:
    """Whether `node` means the same inside a lambda (no yield, await, walrus, zero-argument
    `super()` or a read of the calling frame's locals)."""
    for n in ast.walk(node):
        if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            return False
        if isinstance(n, ast.Name) and n.id in _FRAME_NAMES:
            return False
    return True


class _Rewriter(ast.NodeTransformer):
    """Rewrites each assertion statement of a module, and every other expression statement,
    into a probe call `__probe__.check(ID, lambda: <expr>, ...)`, collecting checks."""

    def __init__(self) -> None:
        self.checks: dict[int, Check] = {}
        self.unsplit: dict[str, int] = {}
        self.function, self.depth, self.in_class = "", 0, False
        self.blocks = 0
        self.plain = True  # plain statements become probes (not where a handler may catch)
        self.renamed: dict[str, str] = {}

    def _add(self, node: ast.AST, tree: tuple, leaves: list, exposed: bool) -> ast.Call | None:
        if not all(_thunkable(leaf) for leaf in leaves):
            return None
        check_id = len(self.checks)
        self.checks[check_id] = Check(
            check_id, node.lineno, tree, len(leaves), exposed, self.depth == 0, self.function
        )
        return _probe_call("check", [ast.Constant(check_id), *(_thunk(leaf) for leaf in leaves)])

    def _left(self, node: ast.stmt) -> ast.stmt:
        """An assertion left as written (it raises inside): counted for its function."""
        self.unsplit[self.function] = self.unsplit.get(self.function, 0) + 1
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        outer, outer_depth, outer_class = self.function, self.depth, self.in_class
        self.function = f"{outer}.{node.name}" if outer else node.name
        if node.name.startswith("test") and (not outer or outer_class):
            # a test's name may say what it wants (`test_overdraft_raises`): the program
            # names it by number, the host maps it back
            new = f"test_{len(self.renamed)}"
            self.renamed[self.function] = f"{outer}.{new}" if outer else new
            node.name = new
        self.depth, self.in_class = 0, False
        node.body = self._block(node.body)
        self.function, self.depth, self.in_class = outer, outer_depth, outer_class
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        outer, outer_class = self.function, self.in_class
        self.function = f"{outer}.{node.name}" if outer else node.name
        self.in_class = True  # a lambda in a class body does not see the class's names
        node.body = self._block(node.body)
        self.function, self.in_class = outer, outer_class
        return node

    def visit_Module(self, node: ast.Module) -> ast.AST:
        node.body = self._block(node.body)
        return node

    def _block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            done = self._statement(statement)
            out.extend(done if isinstance(done, list) else [done])
        return out

    def _statement(self, node: ast.stmt) -> ast.stmt | list[ast.stmt]:
        if isinstance(node, ast.Assert) and not self.in_class:
            split = _Split()
            tree = split.split(node.test, truth=True)
            call = self._add(node, tree, split.leaves, split.exposed)
            return ast.Expr(call) if call is not None else self._left(node)
        if isinstance(node, ast.Expr) and not self.in_class:
            return self._expression(node)
        if isinstance(node, ast.With):
            return self._with(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return self.visit(node)
        self.depth += 1
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, name, None), list):
                outer = self.plain
                if name == "body" and getattr(node, "handlers", None):
                    self.plain = False  # what the body raises is the test's own handler's
                setattr(node, name, self._block(getattr(node, name)))
                self.plain = outer
        for handler in getattr(node, "handlers", []):
            handler.body = self._block(handler.body)
        for case in getattr(node, "cases", []):
            case.body = self._block(case.body)
        self.depth -= 1
        return node

    def _expression(self, node: ast.Expr) -> ast.stmt:
        """An assertion call, or any other expression statement (a call the test makes): each
        is a probe of the same shape; a plain statement's check is only that it did not raise,
        so a raising call looks the same whether the host wants it to raise or not."""
        if isinstance(node.value, ast.Constant):  # a docstring
            return node
        call = _method_call(node.value)
        if call is not None:
            method, args, kw = call
            if method in ("assertRaises", "assertRaisesRegex"):
                if len(args) >= 2 + (method == "assertRaisesRegex"):
                    done = self._raises_call(node, method, args, kw)
                    if done is not None:
                        return done
                return self._left(node)
            split = _assertion(method, args, kw)
            if split is not None:
                probe = self._add(node, *split)
                return ast.Expr(probe) if probe is not None else self._left(node)
            if method.startswith("assert") or method == "fail":
                self.unsplit[self.function] = self.unsplit.get(self.function, 0) + 1
                probe = self._add(node, ("ran",), [node.value], True)
                return ast.Expr(probe) if probe is not None else node
        if not self.plain:
            return node
        probe = self._add(node, ("ran",), [node.value], False)
        return ast.Expr(probe) if probe is not None else node

    def _raised(self, node: ast.AST, method: str, args: list[ast.expr]) -> tuple | None:
        wanted = _names(args[0])
        pattern = _literal(args[1]) if method == "assertRaisesRegex" else (True, None)
        if wanted is None or not pattern[0]:
            return None
        return ("raised", wanted, pattern[1])

    def _raises_call(self, node: ast.Expr, method: str, args: list, kw: dict) -> ast.stmt | None:
        tree = self._raised(node, method, args)
        if tree is None:
            return None
        rest = args[1 + (method == "assertRaisesRegex") :]
        keywords = [ast.keyword(arg=k, value=v) for k, v in kw.items() if k != "msg"]
        call = ast.Call(func=rest[0], args=rest[1:], keywords=keywords)
        probe = self._add(node, tree, [call], False)
        return ast.Expr(probe) if probe is not None else None

    def _with(self, node: ast.With) -> ast.stmt | list[ast.stmt]:
        call = _method_call(node.items[0].context_expr) if node.items else None
        if not (call and call[0] in ("assertRaises", "assertRaisesRegex")):
            outer = self.plain
            self.plain = outer and bool(call) and call[0] == "subTest"  # others may suppress
            self.depth += 1
            node.body = self._block(node.body)
            self.depth -= 1
            self.plain = outer
            return node
        tree = self._raised(node, call[0], call[1]) if len(node.items) == 1 else None
        if tree is None or self.in_class:
            return self._left(node)  # its block runs as written, under unittest's own check
        target = node.items[0].optional_vars
        body = node.body
        if len(body) == 1 and isinstance(body[0], ast.Expr) and _thunkable(body[0].value):
            # the usual block, one call: the same probe as any call the test makes
            probe = self._add(node, tree, [body[0].value], target is not None)
            statements: list[ast.stmt] = []
        else:  # a block of statements: a function of its own, called by the probe
            self.blocks += 1
            name = f"__probe_block_{self.blocks}"
            args = ast.arguments(
                posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]
            )
            block = ast.FunctionDef(
                name=name, args=args, body=body, decorator_list=[], returns=None
            )
            statements = [block]
            call_block = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=[], keywords=[])
            probe = self._add(node, tree, [call_block], True)
        if probe is None:
            return self._left(node)
        if target is not None:  # `as cm`: cm.exception is what the block raised
            statements.append(ast.Assign(targets=[target], value=probe))
        else:
            statements.append(ast.Expr(probe))
        for statement in statements:
            ast.copy_location(statement, node)
        return statements


def split_tests(source: str, filename: str = "<tests>") -> SplitTests:
    """Split the test file `source` (see the module docstring). Raises SyntaxError for a file
    that does not parse."""
    tree = ast.parse(source, filename)
    rewriter = _Rewriter()
    rewriter.visit(tree)
    ast.fix_missing_locations(tree)
    return SplitTests(ast.unparse(tree) + "\n", rewriter.checks, rewriter.unsplit, rewriter.renamed)
