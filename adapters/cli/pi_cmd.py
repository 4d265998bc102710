"""``selfctx pi``: where the Pi coding agent extension is, and installing it into Pi.

The extension's TypeScript sources are installed with the package (``selfctx.adapters.pi``), so a
wheel installed anywhere carries them:

- ``selfctx pi path``: print the extension's folder (``pi install "$(selfctx pi path)"``);
- ``selfctx pi install``: run ``pi install FOLDER`` with the ``pi`` on the ``PATH``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path
from typing import Any

from selfctx.domain.errors import InvalidInput

__all__ = ["extension_dir", "register"]


def extension_dir() -> Path:
    """The folder holding the extension's ``package.json`` (in the source tree or installed)."""
    import selfctx.adapters

    folder = Path(selfctx.adapters.__file__).resolve().parent / "pi"
    if not (folder / "package.json").is_file():
        raise InvalidInput(
            "Pi extension", str(folder), "its files are missing: reinstall self-context-manager"
        )
    return folder


def _path(args: argparse.Namespace) -> int:
    print(extension_dir())
    return 0


def _install(args: argparse.Namespace) -> int:
    folder = extension_dir()
    pi = shutil.which(args.pi)
    if pi is None:
        raise InvalidInput(
            "pi command",
            args.pi,
            "not found on PATH: install the Pi coding agent (npm install -g "
            f"@mariozechner/pi-coding-agent), then run: pi install {folder}",
        )
    return subprocess.run([pi, "install", str(folder)], check=False).returncode


def register(subparsers: Any) -> None:
    """Add ``selfctx pi``."""
    parser = subparsers.add_parser("pi", help="the Pi coding agent extension (path, install)")
    actions = parser.add_subparsers(dest="pi_action", metavar="ACTION", required=True)
    path = actions.add_parser("path", help="print the folder of the extension")
    path.set_defaults(handler=_path)
    install = actions.add_parser("install", help="install the extension into Pi (pi install)")
    install.add_argument("--pi", default="pi", help="the pi command (default: pi on the PATH)")
    install.set_defaults(handler=_install)
