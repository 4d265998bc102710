"""Walk the tree the parser built."""

import operator

from calc.errors import CalcError
from calc.functions import call
from calc.parser import parse

OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def value_of(node):
    if isinstance(node, float):
        return node
    if node[0] == "neg":
        return -value_of(node[1])
    if node[0] == "call":
        _, name, arguments = node
        return call(name, [value_of(argument) for argument in arguments])
    op, left, right = node
    try:
        return OPERATORS[op](value_of(left), value_of(right))
    except ZeroDivisionError:
        raise CalcError("division by zero") from None


def evaluate(text):
    result = float(value_of(parse(text)))
    return int(result) if result.is_integer() else result
