"""``selfctx bench read``: what confined reading costs against reading without confinement.

Every ``.py`` file of this interpreter's standard library is canonicalised and read twice per
round, as an agent read is (``LocalFileReader.canonical``, then ``read``). The reference does what
the reader did before decision 0028: ``realpath()``, a ``stat``, then ``open`` of the path it
named, read and SHA-256, which a swapped directory could lead outside the roots. The rounds
alternate between the two, so that both see the same machine; the figures are medians.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.domain.objects import FilesystemSource

__all__ = ["run_read_bench"]

_HOST = "bench-host"
_CAP = 2 * 1024 * 1024


def _reference(paths: Sequence[str]) -> None:
    for path in paths:
        real = os.path.realpath(path)
        os.stat(real)
        with open(real, "rb") as f:
            hashlib.sha256(f.read()).digest()


def _confined(reader: LocalFileReader, paths: Sequence[str]) -> None:
    for path in paths:
        reader.read(reader.canonical(FilesystemSource(_HOST, path)), _CAP)


def run_read_bench(files: Sequence[Path], *, rounds: int = 7) -> dict[str, Any]:
    """Files per second of each way of reading, as medians over ``rounds`` alternating rounds."""
    paths = [str(p) for p in files]
    root = os.path.commonpath(paths) if paths else "/"
    reader = LocalFileReader(_HOST, [root])
    rates: dict[str, list[float]] = {"confined": [], "reference": []}
    for _ in range(rounds):
        for name in rates:
            began = time.perf_counter()
            if name == "confined":
                _confined(reader, paths)
            else:
                _reference(paths)
            rates[name].append(len(paths) / (time.perf_counter() - began))
    medians = {name: round(statistics.median(values)) for name, values in rates.items()}
    return {
        "files": len(paths),
        "rounds": rounds,
        "files_per_s": medians,
        "ratio": round(medians["confined"] / medians["reference"], 2),
        "per_file_us": {name: round(1e6 / rate, 1) for name, rate in medians.items()},
    }
