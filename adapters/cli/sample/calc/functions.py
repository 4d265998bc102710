"""The named functions an expression may call: max(1, 2), sqrt(9), round(2.5)."""

import math

from calc.errors import CalcError

FUNCTIONS = {
    "abs": abs,
    "max": max,
    "min": min,
    "sqrt": math.sqrt,
    "round": round,
    "hypot": math.hypot,
}

ARITY = {
    "abs": (1, 1),
    "max": (1, None),
    "min": (1, None),
    "sqrt": (1, 1),
    "round": (1, 2),
    "hypot": (1, None),
}
"""(fewest, most) arguments of each function; None: no limit."""


def check_arity(name, arguments):
    fewest, most = ARITY[name]
    if len(arguments) < fewest or (most is not None and len(arguments) > most):
        expected = f"{fewest}" if fewest == most else f"at least {fewest}"
        raise CalcError(f"{name}() takes {expected} arguments, got {len(arguments)}")


def call(name, arguments):
    """Apply the function called ``name`` to the evaluated ``arguments``."""
    function = FUNCTIONS[name]
    check_arity(name, arguments)
    if name == "round" and len(arguments) == 2:
        arguments = [arguments[0], int(arguments[1])]
    return function(*arguments)
