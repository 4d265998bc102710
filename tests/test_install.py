"""The wheel and the sdist, installed into fresh virtual environments outside the checkout, work
as a stranger would use them: ``selfctx --version``, ``replay``, ``xtdb fetch`` and ``start``,
``--store auto``, ``serve --stdio``, ``proxy``, the Pi extension, and a sentence (not a traceback)
where an optional extra is missing. Both distributions pass ``twine check``.

Everything runs from a temporary directory with the user's state redirected there (XDG folders,
the XTDB jar cache), so nothing of the checkout is on the path and nothing of the user's is
touched. The wheel's ``xtdb fetch`` runs Maven and compiles XTDB for real, from a Maven repository
seeded with the one ``make deps-test`` filled (no download); the sdist's reuses what the wheel's
fetched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import venv
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from selfctx.adapters.proxy.scripted import Seen, Step
from selfctx.adapters.tokenizer import data_dir
from selfctx.adapters.xtdb import paths
from tests.conftest import Dists
from tests.proxy.support import scripted

pytestmark = [pytest.mark.slow, pytest.mark.xtdb]

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.1.0"


def _run(
    argv: list[str | os.PathLike[str]],
    env: Mapping[str, str],
    cwd: Path,
    *,
    stdin: str | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        env=dict(env), cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return done.stdout


def test_both_distributions_pass_twine_check_and_carry_the_data(dists: Dists) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists.wheel), str(dists.sdist)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout

    with zipfile.ZipFile(dists.wheel) as archive:
        wheel = set(archive.namelist())
    with tarfile.open(dists.sdist) as archive:
        sdist = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    tracked = [
        p.relative_to(dists.source).as_posix()
        for folder in ("xtdb", "adapters/pi")
        for p in (dists.source / folder).rglob("*")
        if p.is_file()
    ]
    assert any(name.endswith(".clj") for name in tracked)
    for name in tracked:  # the node's project and the Pi extension, whole
        assert "selfctx/" + name in wheel, name
        assert name in sdist, name
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in wheel)
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml"} <= sdist
    assert "selfctx/__init__.py" in wheel
    assert not any(n.startswith(("tests/", "selfctx/tests/")) for n in wheel)


@pytest.fixture(scope="module")
def xtdb_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A jar cache of its own for the installed packages, whose Maven repository is seeded from
    the one ``make deps-test`` filled: the wheel's fetch runs Maven and compiles, offline."""
    home = tmp_path_factory.mktemp("xtdb-home")
    shared = paths.xtdb_home() / "m2"
    if not shared.is_dir():
        pytest.skip(f"no Maven repository at {shared}: run `make deps-test` first")
    shutil.copytree(shared, home / "m2", symlinks=True)
    return home


def _environment(root: Path, xtdb_home: Path) -> dict[str, str]:
    """The user's environment, minus anything that would find the checkout or the user's state."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SELFCTX_", "PYTHON", "VIRTUAL_ENV", "XDG_"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))
    )
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = str(root / name.lower())
    env["SELFCTX_XTDB_HOME"] = str(xtdb_home)
    return env


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(
    request: pytest.FixtureRequest,
    dists: Dists,
    xtdb_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Path, dict[str, str], Path]]:
    """(kind, the venv's bin/, its environment, a working directory under /tmp)."""
    kind = request.param
    root = tmp_path_factory.mktemp(f"installed-{kind}")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    env = _environment(root, xtdb_home)
    dist = dists.wheel if kind == "wheel" else dists.sdist
    python = env_dir / "bin" / "python"
    pip: list[str | os.PathLike[str]] = [python, "-m", "pip", "install", "-q"]
    _ok(_run([*pip, "--disable-pip-version-check", dist], env, root, timeout=900))
    work = root / "work"
    work.mkdir()
    yield kind, env_dir / "bin", env, work
    # Whatever a failed test left running: the node --store auto started, an in-memory one.
    selfctx = env_dir / "bin" / "selfctx"
    _run([selfctx, "xtdb", "stop"], env, work)
    _run([selfctx, "xtdb", "stop", "--in-memory"], env, work)


def test_the_package_is_the_installed_one_and_says_its_version(
    installed: tuple[str, Path, dict[str, str], Path],
) -> None:
    _, bin_dir, env, work = installed
    assert _ok(_run([bin_dir / "selfctx", "--version"], env, work)).strip() == f"selfctx {VERSION}"
    where = _ok(
        _run(
            [
                bin_dir / "python",
                "-c",
                "import selfctx, selfctx.contracts.store as c; "
                "print(selfctx.__version__, selfctx.__file__, c.StoreContract.__name__)",
            ],
            env,
            work,
        )
    ).split()
    assert where[0] == VERSION
    assert where[1].startswith(str(bin_dir.parent)) and "site-packages" in where[1]
    assert where[2] == "StoreContract"  # importable without pytest, which is not installed
    assert _run([bin_dir / "python", "-c", "import pytest"], env, work).returncode != 0


def test_replay_serve_and_the_pi_extension(
    installed: tuple[str, Path, dict[str, str], Path],
) -> None:
    _, bin_dir, env, work = installed
    selfctx = bin_dir / "selfctx"
    replayed = _ok(_run([selfctx, "replay", _sample(bin_dir, env, work)], env, work))
    assert re.search(r"^total: naive [0-9,]+, managed [0-9,]+", replayed, re.M)

    request = {"jsonrpc": "2.0", "id": 1, "method": "session.open",
               "params": {"session_id": "s", "format": "openai"}}  # fmt: skip
    served = _ok(_run([selfctx, "serve", "--stdio"], env, work, stdin=json.dumps(request) + "\n"))
    answer = json.loads(served.splitlines()[0])
    assert answer["result"]["session_id"] == "s" and answer["result"]["policy"] == "relevance"

    folder = Path(_ok(_run([selfctx, "pi", "path"], env, work)).strip())
    assert folder.is_relative_to(bin_dir.parent)
    assert {"selfctx.ts", "rpc.ts", "convert.ts", "package.json"} <= {
        p.name for p in folder.iterdir()
    }


def _sample(bin_dir: Path, env: Mapping[str, str], work: Path) -> str:
    return _ok(
        _run(
            [
                bin_dir / "python",
                "-c",
                "import selfctx.adapters.cli as c, pathlib; "
                "print(pathlib.Path(c.__file__).parent / 'sample_session.json')",
            ],
            env,
            work,
        )
    ).strip()


def test_xtdb_fetch_start_and_store_auto(
    installed: tuple[str, Path, dict[str, str], Path],
) -> None:
    kind, bin_dir, env, work = installed
    selfctx = bin_dir / "selfctx"
    fetched = _ok(_run([selfctx, "xtdb", "fetch"], env, work, timeout=1800))
    # The wheel's environment runs first: Maven and the compile run from the installed project.
    assert fetched.startswith("fetched " if kind == "wheel" else "already present: "), fetched

    if kind == "wheel":
        url = _ok(_run([selfctx, "xtdb", "start", "--in-memory"], env, work)).strip()
        assert url.startswith("http://127.0.0.1:")
        assert _run([selfctx, "xtdb", "status", "--in-memory"], env, work).returncode == 0
        assert "stopped" in _ok(_run([selfctx, "xtdb", "stop", "--in-memory"], env, work))

    auto = _run([selfctx, "replay", _sample(bin_dir, env, work), "--store", "auto"], env, work)
    _ok(auto)
    assert "started a local XTDB node for --store auto" in auto.stderr
    assert "stop it with: selfctx xtdb stop" in auto.stderr
    listed = _run([selfctx, "sessions", "--store", "auto"], env, work)
    assert _ok(listed).strip() and "started a local XTDB node" not in listed.stderr  # reused
    assert "stopped" in _ok(_run([selfctx, "xtdb", "stop"], env, work))
    assert not list((bin_dir.parent).rglob("selfctx/xtdb/target"))  # nothing written there


def test_the_proxy_forwards_to_its_upstream(
    installed: tuple[str, Path, dict[str, str], Path],
) -> None:
    _, bin_dir, env, work = installed

    def script(seen: Seen) -> Step:
        return Step("Hello from the scripted model.")

    with scripted(script) as (model, upstream):
        argv = [bin_dir / "selfctx", "proxy", "--port", "0", "--store", "memory",
                "--upstream-openai", upstream + "/v1", "--workspace", str(work)]  # fmt: skip
        process = subprocess.Popen(
            [str(a) for a in argv],
            env=env,
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            banner = process.stdout.readline()
            base = re.search(r"listening on (http://\S+)", banner)
            assert base, banner + (process.stderr.read() if process.stderr else "")
            body = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}]}
            answer = httpx.post(f"{base.group(1)}/v1/chat/completions", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == (
                "Hello from the scripted model."
            )
            assert len(model.requests) == 1
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)


def test_optional_extras_fail_with_a_sentence(
    installed: tuple[str, Path, dict[str, str], Path], tmp_path: Path
) -> None:
    """The plain install has neither tiktoken (``tokens``) nor matplotlib (``chart``)."""
    _, bin_dir, env, work = installed
    selfctx = bin_dir / "selfctx"
    ranks = tmp_path / "ranks"  # the verified rank files, so that no registry is asked
    ranks.mkdir()
    for name in ("o200k_base.tiktoken", "cl100k_base.tiktoken"):
        if not (data_dir() / name).is_file():
            pytest.skip("no tokenizer data: run `make deps-test` first")
        shutil.copy2(data_dir() / name, ranks / name)
    installed_tokens = _run([selfctx, "tokenizer", "install", "--dir", ranks], env, work)
    assert installed_tokens.returncode == 1, installed_tokens.stdout + installed_tokens.stderr
    assert "token counts are exact" not in installed_tokens.stdout
    assert "self-context-manager[tokens]" in installed_tokens.stderr
    assert "Traceback" not in installed_tokens.stderr

    chart = _run([selfctx, "bench", "context", "--chart", tmp_path / "c.png", work], env, work)
    assert chart.returncode == 2
    assert "self-context-manager[chart]" in chart.stderr and "Traceback" not in chart.stderr

    no_store = _run([selfctx, "sessions"], env, work)
    assert no_store.returncode == 2
    assert "no store given" in no_store.stderr and "None" not in no_store.stderr
