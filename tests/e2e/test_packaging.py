"""The Makefile and pyproject.toml as a newcomer meets them: what `make run` and
`make test` would install (dry runs, nothing is installed), and clean package metadata."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(target: str, venv: Path) -> str:
    """The commands `make TARGET` would run for a fresh venv, without running them."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout


def pip_installs(commands: str) -> list[str]:
    return [line for line in commands.splitlines() if "pip install" in line
            and "--upgrade pip" not in line]


def test_make_run_installs_the_product_without_the_dev_extra(tmp_path: Path) -> None:
    """`make run` installs `-e .` (no test tools) and starts the daemon on the example config."""
    commands = dry_run("run", tmp_path / "venv")
    [install] = pip_installs(commands)
    assert install.rstrip().endswith("-e .")
    assert "[dev]" not in commands
    assert "daemon start --config config.example.toml" in commands


def test_make_test_installs_the_dev_extra(tmp_path: Path) -> None:
    """`make test` installs `-e '.[dev]'` before running pytest."""
    commands = dry_run("test", tmp_path / "venv")
    [install] = pip_installs(commands)
    assert "'.[dev]'" in install
    assert "pytest" in commands


def test_the_license_is_an_spdx_expression() -> None:
    """`license = "MIT"` (PEP 639): setuptools prints no deprecation warning on install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    # SPDX strings need setuptools 77; older ones reject them.
    requires = project["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=") and
               int(r.split(">=")[1].split(".")[0]) >= 77 for r in requires), requires
