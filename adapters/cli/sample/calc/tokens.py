"""Split an arithmetic expression into number and operator tokens."""

import re

TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(.))")


def tokenize(text):
    tokens = []
    for number, op in TOKEN.findall(text):
        if number:
            tokens.append(("num", float(number)))
        elif op.strip():
            tokens.append(("op", op))
    return tokens
