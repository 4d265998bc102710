"""Command line: python -m calc "2 * (3 + 4)" prints 14."""

import sys

from calc.errors import CalcError
from calc.evaluate import evaluate


def main(argv):
    if len(argv) != 1:
        print('usage: python -m calc "EXPRESSION"', file=sys.stderr)
        return 2
    try:
        print(evaluate(argv[0]))
    except CalcError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
