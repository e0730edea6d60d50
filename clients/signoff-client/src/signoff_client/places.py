"""Where a file an agent names really is: inside its project, a protected part of it, or
outside it. One rule for every agent mapping (Claude Code's tools, Hermes' tools).

"Inside" is decided on the *resolved* path, never on the spelling: a symlink in the
project (``dotfiles -> ~``) leads outside it, so ``dotfiles/.bashrc`` is outside. A file
that does not exist yet is placed by its deepest existing parent, resolved the same way
(``os.path.realpath`` follows every existing link, dangling ones included, and applies
``..`` after that). A regular file with more than one hard link is outside too: writing it
changes a file elsewhere.

Some places inside a project act outside it, so they count as protected (a person is
asked): the repository's own data (``.git``), the agent's settings (``.claude``), CI
definitions (``.github``, ``.gitlab-ci.yml``, ``.ci`` …) and hooks that run code on a
later commit, checkout or ``cd`` (``.husky``, ``.pre-commit-config.yaml``, ``.envrc`` …).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

# Directories, at any depth of the project, whose files change more than the project.
PROTECTED_DIRS = frozenset({
    ".git", ".claude", ".github", ".gitlab", ".ci", ".circleci", ".buildkite", ".forgejo",
    ".gitea", ".woodpecker", ".husky", ".githooks", ".git-hooks", ".hooks", ".devcontainer",
    ".vscode", ".cursor",
})
# Files, at any depth, that CI services, hook managers or agent hosts run (an MCP host
# starts the commands a project's .mcp.json names).
PROTECTED_FILES = frozenset({
    ".gitlab-ci.yml", ".travis.yml", ".drone.yml", ".woodpecker.yml", "Jenkinsfile",
    "azure-pipelines.yml", "bitbucket-pipelines.yml", "appveyor.yml", ".appveyor.yml",
    "cloudbuild.yaml", ".pre-commit-config.yaml", ".pre-commit-hooks.yaml", "lefthook.yml",
    ".lefthook.yml", "lefthook.yaml", ".lefthook.yaml", ".envrc", ".gitmodules",
    ".gitattributes", ".gitconfig", ".mcp.json",
})

_DIRS = frozenset(d.lower() for d in PROTECTED_DIRS)
_FILES = frozenset(f.lower() for f in PROTECTED_FILES)


class Place(enum.StrEnum):
    """Where a path lands, as far as asking goes."""

    INSIDE = "inside"  # in the project: the agent's own work
    PROTECTED = "protected"  # in the project, but CI, hooks, git or agent settings
    OUTSIDE = "outside"  # anywhere else (through a symlink or a hard link included)


def resolved(project: str | os.PathLike[str], path: str) -> Path:
    """``path`` (relative to ``project``; ``~`` is the home directory) with every symlink
    of its existing part followed."""
    given = Path(os.path.expanduser(path)) if path.startswith("~") else Path(path)
    return Path(os.path.realpath(Path(project) / given))


def place_of(project: str | os.PathLike[str], path: str) -> Place:
    """Where ``path`` really is with respect to ``project`` (see the module docstring)."""
    try:
        root = Path(os.path.realpath(project))
        real = resolved(project, path)
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return Place.OUTSIDE
    if not real.is_relative_to(root) or _hard_linked(real):
        return Place.OUTSIDE
    # Compared without case: on a case-insensitive disk ".GIT/hooks" is ".git/hooks".
    parts = [p.lower() for p in real.relative_to(root).parts]
    if any(p in _DIRS for p in parts[:-1]) or (parts and (
            parts[-1] in _FILES or parts[-1] in _DIRS)):
        return Place.PROTECTED
    return Place.INSIDE


@dataclass(frozen=True)
class Placed:
    """One path an agent named, and where it really is."""

    spelled: str  # as the agent wrote it
    real: str  # resolved
    place: Place
    moved: bool  # the real path is not the spelled one read plainly (a symlink, ``~``)

    def words(self, verb: str) -> str:
        """A card's words for it ("" inside the project): "writes dotfiles/.bashrc:
        outside the project (really /home/me/.bashrc)"."""
        if self.place is Place.INSIDE:
            return ""
        where = ("a git, CI, hook or agent-settings file of the project"
                 if self.place is Place.PROTECTED else "outside the project")
        return f"{verb} {self.spelled}: {where}" + (f" (really {self.real})" if self.moved
                                                     else "")


def placed(project: str | os.PathLike[str], path: str) -> Placed:
    """``path`` placed with respect to ``project``."""
    found = place_of(project, path)
    try:
        real = str(resolved(project, path))
    except (OSError, RuntimeError, ValueError):
        return Placed(path, path, found, False)
    plain = {os.path.normpath(Path(project) / path),
             os.path.normpath(Path(os.path.realpath(project)) / path)}
    return Placed(path, real, found, real not in plain)


def _hard_linked(real: Path) -> bool:
    try:
        st = real.lstat()
    except OSError:
        return False  # not there yet
    return real.is_file() and st.st_nlink > 1
