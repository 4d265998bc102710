"""The one error calc raises for a bad expression."""


class CalcError(Exception):
    """An expression calc cannot evaluate; the message says why."""
