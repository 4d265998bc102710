"""pytest when it is installed; otherwise a stand-in with the few names the suites use at import
time (their decorators), so that importing a suite never needs a test runner. Running one does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["pytest"]


class _Absent:
    """What the suites use of pytest at import time; calling a test without pytest fails."""

    class mark:
        @staticmethod
        def parametrize(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
            return lambda function: function

    @staticmethod
    def fixture(function: Any = None, **kwargs: Any) -> Any:
        return function if function is not None else (lambda f: f)

    @staticmethod
    def raises(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the contract suites run under pytest, which is not installed")


try:
    import pytest
except ImportError:  # a plain install
    pytest = _Absent()  # type: ignore[assignment]
