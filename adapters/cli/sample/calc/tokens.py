"""Split an arithmetic expression into number, name and operator tokens."""

import re

TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_]\w*)|(.))")


def tokenize(text):
    """The tokens of ``text``: ("num", 2.0), ("name", "max") or ("op", "+")."""
    tokens = []
    for number, name, op in TOKEN.findall(text):
        if number:
            tokens.append(("num", float(number)))
        elif name:
            tokens.append(("name", name))
        elif op.strip():
            tokens.append(("op", op))
    return tokens
