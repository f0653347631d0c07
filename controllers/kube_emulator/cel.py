"""A small interpreter for the CEL subset that CRD ``x-kubernetes-validations`` rules use.

Supported: literals (int, double, string, bool, null, lists, maps), ``self``/``oldSelf``,
field access and indexing, ``! - * / % + -``, comparisons, ``in``, ``&& || ?:``, the macros
``has()``, ``all``, ``exists``, ``exists_one``, ``map`` (2 and 3 arguments) and ``filter``,
and the functions ``size``, ``contains``, ``startsWith``, ``endsWith``, ``matches``,
``lowerAscii``, ``upperAscii``, ``int``, ``double``, ``string``. Numbers compare across int and
double, as CEL's heterogeneous equality does. Anything else raises :class:`CelError`, and the
rule is then reported as not evaluable rather than silently passing.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

_TOKEN = re.compile(
    r"""
    \s*(?:
      (?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+|0x[0-9a-fA-F]+|\d+)u?
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]{}])
    )""",
    re.VERBOSE,
)


class CelError(Exception):
    pass


class UnsupportedRule(CelError):
    """The rule uses CEL beyond this interpreter's subset."""


class _Missing(Exception):
    """A field that is not set was read (CEL: 'no such key')."""


def _tokenize(src: str) -> list[tuple[str, Any]]:
    pos = 0
    out: list[tuple[str, Any]] = []
    src = src.strip()
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m or m.end() == pos:
            raise CelError(f"cannot parse rule at {src[pos : pos + 10]!r}")
        pos = m.end()
        if m.group("num") is not None:
            text = m.group("num")
            if text.startswith("0x"):
                out.append(("lit", int(text, 16)))
            elif any(c in text for c in ".eE"):
                out.append(("lit", float(text)))
            else:
                out.append(("lit", int(text)))
        elif m.group("str") is not None:
            raw = m.group("str")[1:-1]
            out.append(("lit", bytes(raw, "utf-8").decode("unicode_escape")))
        elif m.group("id") is not None:
            word = m.group("id")
            lit = {"true": True, "false": False, "null": None}
            out.append(("lit", lit[word]) if word in lit else ("id", word))
        else:
            out.append(("op", m.group("op")))
    out.append(("end", None))
    return out


Node = Callable[[dict[str, Any]], Any]
_MACROS = {"all", "exists", "exists_one", "map", "filter"}


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = _tokenize(src)
        self.i = 0

    def peek(self) -> tuple[str, Any]:
        return self.toks[self.i]

    def take(self, value: str | None = None) -> tuple[str, Any]:
        tok = self.toks[self.i]
        if value is not None and tok != ("op", value):
            raise CelError(f"expected {value!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, value: str) -> bool:
        return self.toks[self.i] == ("op", value)

    def parse(self) -> Node:
        node = self.ternary()
        if self.peek()[0] != "end":
            raise CelError(f"unexpected {self.peek()[1]!r}")
        return node

    def ternary(self) -> Node:
        cond = self.binary(0)
        if self.at("?"):
            self.take("?")
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            return lambda env: a(env) if _truth(cond(env)) else b(env)
        return cond

    _LEVELS: tuple[tuple[str, ...], ...] = (
        ("||",),
        ("&&",),
        ("==", "!=", "<", "<=", ">", ">=", "in"),
        ("+", "-"),
        ("*", "/", "%"),
    )

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        ops = self._LEVELS[level]
        while True:
            kind, val = self.peek()
            if not (
                (kind == "op" and val in ops) or (kind == "id" and val == "in" and "in" in ops)
            ):
                return left
            self.take()
            right = self.binary(level + 1)
            left = _binop(val, left, right)

    def unary(self) -> Node:
        if self.at("!"):
            self.take()
            inner = self.unary()
            return lambda env: not _truth(inner(env))
        if self.at("-"):
            self.take()
            inner = self.unary()
            return lambda env: -inner(env)
        return self.postfix(self.primary())

    def args(self) -> list[Node]:
        self.take("(")
        out: list[Node] = []
        while not self.at(")"):
            out.append(self.ternary())
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return out

    def postfix(self, node: Node) -> Node:
        while True:
            if self.at("."):
                self.take(".")
                kind, name = self.take()
                if kind != "id":
                    raise CelError(f"expected a name after '.', found {name!r}")
                if self.at("("):
                    if name in _MACROS:
                        node = self.macro(name, node)
                    else:
                        node = _method(name, node, self.args())
                else:
                    node = _field(node, name)
            elif self.at("["):
                self.take("[")
                index = self.ternary()
                self.take("]")
                node = _index(node, index)
            else:
                return node

    def macro(self, name: str, target: Node) -> Node:
        self.take("(")
        kind, var = self.take()
        if kind != "id":
            raise CelError(f"{name}() needs a variable name first")
        self.take(",")
        first = self.ternary()
        second = None
        if self.at(","):
            self.take(",")
            second = self.ternary()
        self.take(")")
        return _comprehension(name, target, var, first, second)

    def primary(self) -> Node:
        kind, val = self.take()
        if kind == "lit":
            return lambda env: val
        if kind == "op" and val == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if kind == "op" and val == "[":
            items: list[Node] = []
            while not self.at("]"):
                items.append(self.ternary())
                if not self.at("]"):
                    self.take(",")
            self.take("]")
            return lambda env: [n(env) for n in items]
        if kind == "op" and val == "{":
            pairs: list[tuple[Node, Node]] = []
            while not self.at("}"):
                k = self.ternary()
                self.take(":")
                pairs.append((k, self.ternary()))
                if not self.at("}"):
                    self.take(",")
            self.take("}")
            return lambda env: {k(env): v(env) for k, v in pairs}
        if kind == "id":
            if val == "has" and self.at("("):
                return self.has()
            if self.at("("):
                return _function(val, self.args())
            name = val
            return lambda env: _lookup(env, name)
        raise CelError(f"unexpected {val!r}")

    def has(self) -> Node:
        self.take("(")
        target = self.postfix(self.primary_no_field())
        self.take(")")
        probe = getattr(target, "has_probe", None)
        if probe is None:
            raise CelError("has() needs a field selection, e.g. has(self.field)")
        return probe  # type: ignore[no-any-return]

    def primary_no_field(self) -> Node:
        return self.primary()


def _lookup(env: dict[str, Any], name: str) -> Any:
    if name not in env:
        raise CelError(f"undeclared reference to {name!r}")
    return env[name]


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CelError(f"expected a bool, got {type(value).__name__}")
    return value


def _field(node: Node, name: str) -> Node:
    def get(env: dict[str, Any]) -> Any:
        obj = node(env)
        if not isinstance(obj, dict):
            raise CelError(f"cannot select {name!r} from a {type(obj).__name__}")
        if name not in obj:
            raise _Missing(name)
        return obj[name]

    def has(env: dict[str, Any]) -> bool:
        # as the real API server: a field set to null (a nullable field) is not "set"
        obj = node(env)
        return isinstance(obj, dict) and obj.get(name) is not None

    get.has_probe = has  # type: ignore[attr-defined]
    return get


def _index(node: Node, index: Node) -> Node:
    def get(env: dict[str, Any]) -> Any:
        obj, key = node(env), index(env)
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError) as exc:
            raise _Missing(str(key)) from exc

    return get


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _binop(op: str, left: Node, right: Node) -> Node:
    if op == "||":
        return _or(left, right)
    if op == "&&":
        return _and(left, right)
    fn = _BINARY.get(op) or _unknown_operator(op)

    def apply(env: dict[str, Any]) -> Any:
        return fn(left(env), right(env))

    return apply


def _or(left: Node, right: Node) -> Node:
    """CEL's commutative ``||``: an error on one side is absorbed when the other is true."""

    def or_(env: dict[str, Any]) -> bool:
        try:
            if _truth(left(env)):
                return True
        except (_Missing, CelError):
            if _truth(right(env)):
                return True
            raise
        return _truth(right(env))

    return or_


def _and(left: Node, right: Node) -> Node:
    """CEL's commutative ``&&``: an error on one side is absorbed when the other is false."""

    def and_(env: dict[str, Any]) -> bool:
        try:
            if not _truth(left(env)):
                return False
        except (_Missing, CelError):
            if not _truth(right(env)):
                return False
            raise
        return _truth(right(env))

    return and_


def _comparable(a: Any, b: Any) -> bool:
    return (_num(a) and _num(b)) or type(a) is type(b)


def _equal(a: Any, b: Any) -> bool:
    return a == b if _comparable(a, b) else False


def _ordering(op: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def ordered(a: Any, b: Any) -> bool:
        if not _comparable(a, b):
            raise CelError(f"no such overload: {type(a).__name__} {op} {type(b).__name__}")
        return compare(a, b)

    return ordered


def _divide(a: Any, b: Any) -> Any:
    if b == 0:
        raise CelError("division by zero")
    return a // b if isinstance(a, int) and isinstance(b, int) else a / b


def _modulo(a: Any, b: Any) -> Any:
    if b == 0:
        raise CelError("modulus by zero")
    return a % b


def _unknown_operator(op: str) -> Callable[[Any, Any], Any]:
    def unknown(a: Any, b: Any) -> Any:
        raise CelError(f"unknown operator {op}")

    return unknown


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "==": _equal,
    "!=": lambda a, b: not _equal(a, b),
    "in": lambda a, b: a in b,
    "<": _ordering("<", operator.lt),
    "<=": _ordering("<=", operator.le),
    ">": _ordering(">", operator.gt),
    ">=": _ordering(">=", operator.ge),
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _divide,
    "%": _modulo,
}


def _size(v: Any) -> int:
    if isinstance(v, (str, list, dict, bytes)):
        return len(v)
    raise CelError(f"size() of a {type(v).__name__}")


_FUNCS: dict[str, Callable[..., Any]] = {
    "size": _size,
    "int": lambda v: int(v),
    "double": lambda v: float(v),
    "string": lambda v: (
        v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
    ),
}
_METHODS: dict[str, Callable[..., Any]] = {
    "size": _size,
    "contains": lambda s, x: x in s,
    "startsWith": lambda s, x: s.startswith(x),
    "endsWith": lambda s, x: s.endswith(x),
    "matches": lambda s, x: _matches(s, x),
    "lowerAscii": lambda s: s.lower(),
    "upperAscii": lambda s: s.upper(),
}


def _matches(text: Any, pattern: Any) -> bool:
    """CEL's ``matches``: RE2 semantics, as in kube-apiserver (kube_emulator.regex)."""
    from kube_emulator.regex import RegexError, search

    if not isinstance(text, str) or not isinstance(pattern, str):
        raise CelError(f"no such overload: {type(text).__name__}.matches()")
    try:
        return search(pattern, text)
    except RegexError as exc:
        raise CelError(str(exc)) from None


def _function(name: str, args: list[Node]) -> Node:
    fn = _FUNCS.get(name)
    if fn is None:
        raise CelError(f"unsupported function {name}()")
    return lambda env: fn(*(a(env) for a in args))


def _method(name: str, target: Node, args: list[Node]) -> Node:
    fn = _METHODS.get(name)
    if fn is None:
        raise CelError(f"unsupported function .{name}()")
    return lambda env: fn(target(env), *(a(env) for a in args))


def _comprehension(name: str, target: Node, var: str, first: Node, second: Node | None) -> Node:
    def run(env: dict[str, Any]) -> Any:
        coll = target(env)
        items = list(coll) if isinstance(coll, (list, dict)) else None
        if items is None:
            raise CelError(f"{name}() over a {type(coll).__name__}")

        def with_var(x: Any, node: Node) -> Any:
            inner = dict(env)
            inner[var] = x
            return node(inner)

        if name == "all":
            return all(_truth(with_var(x, first)) for x in items)
        if name == "exists":
            return any(_truth(with_var(x, first)) for x in items)
        if name == "exists_one":
            return sum(1 for x in items if _truth(with_var(x, first))) == 1
        if name == "filter":
            return [x for x in items if _truth(with_var(x, first))]
        if second is None:
            return [with_var(x, first) for x in items]
        return [with_var(x, second) for x in items if _truth(with_var(x, first))]

    return run


@lru_cache(maxsize=512)
def compile_rule(rule: str) -> Node:
    try:
        return _Parser(rule).parse()
    except CelError as exc:
        raise UnsupportedRule(str(exc)) from exc


def evaluate(rule: str, self_value: Any, old_value: Any = None) -> bool:
    """True when the rule holds. Raises CelError when it cannot be evaluated."""
    env = {"self": self_value}
    if old_value is not None:
        env["oldSelf"] = old_value
    node = compile_rule(rule)
    try:
        return _truth(node(env))
    except _Missing as exc:
        raise CelError(f"no such key: {exc}") from exc
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, re.error) as exc:
        raise CelError(str(exc)) from exc


def uses_old_self(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None
