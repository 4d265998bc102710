"""Precedence climbing over the token list."""

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

    def atom(self):
        kind, value = self.take()
        if kind == "num":
            return value
        if value == "(":
            node = self.expression(0)
            self.take()  # ")"
            return node
        if value == "-":
            return ("neg", self.atom())
        raise SyntaxError(f"unexpected token {value!r}")

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
    return Parser(text).expression(0)
