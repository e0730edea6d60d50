"""Install a test plug-in package into a directory as pip would, offline.

pip needs a build backend (setuptools with wheel) to install from a source tree, which
a fresh venv may lack and the tests must not download. What an installed package is to
`importlib.metadata` — its modules plus a ``<name>-<version>.dist-info`` with METADATA
and entry_points.txt — is written here from the package's own pyproject.toml, so that
file stays the one place the plug-in is registered.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ECHO = HERE / "signoff_echo_surface"


def install_plugin(project: Path, target: Path) -> Path:
    """Install ``project`` (a folder with pyproject.toml) into ``target``; return target."""
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    meta = pyproject["project"]
    name, version = meta["name"], meta["version"]
    target.mkdir(parents=True, exist_ok=True)
    for package in pyproject["tool"]["setuptools"]["packages"]:
        shutil.copytree(project / package, target / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    dist = target / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    groups = [f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in eps.items())
              for group, eps in meta.get("entry-points", {}).items()]
    (dist / "entry_points.txt").write_text("\n".join(groups), encoding="utf-8")
    (dist / "INSTALLER").write_text("signoff-tests\n", encoding="utf-8")
    return target
