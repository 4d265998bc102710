"""A tiny arithmetic expression evaluator."""

from calc.evaluate import evaluate

__all__ = ["evaluate"]
