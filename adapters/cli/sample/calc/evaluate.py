"""Walk the tree the parser built."""

import operator

from calc.parser import parse

OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def value_of(node):
    if isinstance(node, float):
        return node
    if node[0] == "neg":
        return -value_of(node[1])
    op, left, right = node
    return OPERATORS[op](value_of(left), value_of(right))


def evaluate(text):
    result = value_of(parse(text))
    return int(result) if result.is_integer() else result
