"""Precedence climbing over the token list.

The tree is made of tuples: a number is a float, ("neg", operand) negates,
(op, left, right) applies a binary operator and ("call", name, arguments)
calls one of the named functions of calc/functions.py.
"""

from calc.errors import CalcError
from calc.tokens import tokenize

PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


class Parser:
    def __init__(self, text):
        self.tokens = tokenize(text)
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expect(self, value):
        kind, found = self.take()
        if found != value:
            raise CalcError(f"expected {value!r}, found {found!r}")

    def atom(self):
        kind, value = self.take()
        if kind == "num":
            return value
        if kind == "name":
            return ("call", value, self.arguments())
        if value == "(":
            node = self.expression(0)
            self.expect(")")
            return node
        if value == "-":
            return ("neg", self.atom())
        raise CalcError(f"unexpected token {value!r}")

    def arguments(self):
        """The arguments of a call: "(" expression ("," expression)* ")"."""
        self.expect("(")
        arguments = [self.expression(0)]
        while self.peek()[1] == ",":
            self.take()
            arguments.append(self.expression(0))
        self.expect(")")
        return arguments

    def expression(self, min_precedence):
        left = self.atom()
        while True:
            kind, op = self.peek()
            if kind != "op" or op not in PRECEDENCE or PRECEDENCE[op] < min_precedence:
                return left
            self.take()
            right = self.expression(PRECEDENCE[op])
            left = (op, left, right)


def parse(text):
    parser = Parser(text)
    tree = parser.expression(0)
    if parser.pos < len(parser.tokens):
        raise CalcError(f"unexpected token {parser.peek()[1]!r}")
    return tree
