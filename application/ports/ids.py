"""The id source port: fresh identifiers, so that use cases stay deterministic under test."""

from __future__ import annotations

import abc


class IdSource(abc.ABC):
    """Makes identifiers nobody has used before."""

    @abc.abstractmethod
    def new_id(self) -> str:
        """A fresh identifier (letters, digits and ``-`` only)."""
