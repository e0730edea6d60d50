"""File tools confined to the work dir: read_file, list_dir, write_file, delete_file.

Confinement lives in one function, :func:`confine`, so every tool (run_command's cwd
included) refuses the same paths the same way: a ``..`` that climbs out, an absolute path
elsewhere, or a symlink whose real target is elsewhere. It decides before anything is
opened or created, so a refused action leaves the disk as it was. :func:`reach` adds the
daemon's own files (`signoff.runtime.state.ProtectedFiles`): every tool asks it, so the
database, its siblings and the state dir are refused by identity wherever they are, and
a write or delete through a hard link or a symlink is refused.

Fingerprints use the *lexically normalized* path relative to the work dir: "a/../b.txt",
"./b.txt" and "b.txt" all become "b.txt". A grant is meant for a target, not for one
spelling of it; without this a planner that respells a path would ask the person again
for a file they already approved (and a person would see two "different" targets that
are the same file). The normalization is lexical on purpose: it must not depend on what
is on disk when the action is planned, and :func:`confine` applies the same lexical step
before resolving symlinks, so the file that is touched is the file the fingerprint names.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import os
import posixpath
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from signoff.errors import BadArguments, PathEscape, ToolError
from signoff.runtime.models import RiskClass
from signoff.runtime.tools.base import Param, Preview, ToolContext, bounded, decode_prefix

MAX_DIR_ENTRIES = 1000  # a listing is for a person or a model to read, not a full crawl
# A file operation this small runs on the event loop: on the local work dir it takes
# microseconds, less than the hand-over to a thread and back (measured: a thread hop per
# call was 18 % of a write_file task's busy samples; and while any thread runs, each
# database call of the loop waits for the GIL). Larger ones still go to a thread.
INLINE_BYTES = 64 * 1024


@functools.lru_cache(maxsize=64)
def _real_root(work_dir: Path) -> Path:
    """The work dir with its symlinks resolved, once per work dir (not once per call:
    it was resolved three times per write). A node's work dir does not move under it;
    each path inside it is still resolved on every call."""
    return work_dir.resolve()


DIFF_INPUT = 512_000  # bytes of the current file compared; a larger one is not diffed


def _check_raw(raw: str) -> None:
    """Reject strings no filesystem call could take (the OS error would be cryptic)."""
    if "\x00" in raw:
        raise BadArguments(f"path {raw!r} contains a NUL byte")


def normalize_path(work_dir: Path | None, path: str) -> str:
    """The lexical, work-dir-relative spelling of ``path`` (POSIX separators).

    Absolute paths inside ``work_dir`` become relative; paths that climb out stay as they
    are written after normalization ("../x", "/etc/passwd") so a person sees them plainly.
    Without a work dir, absolute paths stay absolute.
    """
    _check_raw(path)
    norm = os.path.normpath(path) if path else "."
    if os.path.isabs(norm):
        if work_dir is None:
            return Path(norm).as_posix()
        candidate = Path(norm)
        # The work dir may be spelled through a symlink (/tmp → /private/tmp): accept both.
        for base in (Path(os.path.normpath(work_dir.absolute())), _real_root(work_dir)):
            if candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix() or "."
        return candidate.as_posix()
    # normpath's answer is already POSIX on POSIX; a Path of it was a third of labelling
    # a list_dir call (once per step at POST /tasks).
    return norm if os.sep == "/" else Path(norm).as_posix()


def _escapes(rel: str) -> bool:
    return os.path.isabs(rel) or rel == ".." or rel.startswith("../")


def confine(work_dir: Path, path: str | os.PathLike[str]) -> Path:
    """Resolve ``path`` inside ``work_dir`` or raise :class:`PathEscape`; touches nothing.

    Relative paths resolve against the work dir; absolute paths must already lie inside
    it. A ``..`` that leaves the work dir is refused even when a later part would come
    back in: such a path only makes sense as an attempt to confuse a reader. The result is
    the real path (symlinks resolved), which must also lie inside the work dir.
    """
    raw = os.fspath(path)
    root = _real_root(work_dir)
    rel = normalize_path(work_dir, raw)
    if _escapes(rel):
        raise PathEscape(f"path {raw!r} leaves the work dir {root}")
    try:
        real = (root / rel).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop: RuntimeError before 3.13
        raise ToolError(f"path {raw!r} cannot be resolved: {exc}") from exc
    if not real.is_relative_to(root):
        raise PathEscape(f"path {raw!r} leaves the work dir {root} (through a symlink)")
    return real


def reach(ctx: ToolContext, raw: str, *, write: bool = False) -> Path:
    """:func:`confine` plus the daemon's own files: the real path a tool may use for
    ``raw``, or PathEscape. ``write`` (write_file, delete_file) also refuses a file with
    other hard links, and a path whose last part is a symlink."""
    real = confine(ctx.work_dir, raw)
    if real != _real_root(ctx.work_dir):  # the work dir itself may lie in the state dir
        ctx.protected.refuse(raw, real, write=write)
    # One lstat of the path as written (its parents were resolved by confine).
    if write and os.path.islink(_real_root(ctx.work_dir) / normalize_path(ctx.work_dir, raw)):
        raise PathEscape(f"path {raw!r} is a symlink; the tools write and delete only the "
                         f"file itself, not through a link to it")
    return real


def _entry(work_dir: Path, raw: str) -> Path:
    """The path as written, inside its (confined) parent: the link itself, not its target."""
    rel = normalize_path(work_dir, raw)
    return confine(work_dir, posixpath.dirname(rel) or ".") / posixpath.basename(rel)


def _rel(work_dir: Path, real: Path) -> str:
    return real.relative_to(_real_root(work_dir)).as_posix() or "."


def _os_error(tool: str, raw: str, exc: OSError) -> ToolError:
    """Turn an OSError into a message that names the tool and the path as given."""
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"{tool}: no such file or directory: {raw!r}")
    if isinstance(exc, PermissionError):
        return ToolError(f"{tool}: permission denied: {raw!r}")
    return ToolError(f"{tool}: {raw!r}: {exc.strerror or exc}")


class _PathTool:
    """Shared shape of the four file tools: one ``path`` argument is the target."""

    name: str
    capability: str
    description: str
    params: tuple[Param, ...]
    risk: RiskClass
    verb: str  # how a card says it: "Read", "Write file", "Delete file"
    content: tuple[str, ...] = ()
    writes = False  # writes or deletes: hard links and symlinks are refused too

    def __init__(self, *, work_dir: Path | None = None) -> None:
        # Only used to spell absolute paths relative to the work dir in fingerprints.
        self._work_dir = work_dir

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return self.risk

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"path": normalize_path(self._work_dir, args["path"])}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (normalize_path(self._work_dir, args["path"]),)

    def summary(self, args: dict[str, Any]) -> str:
        return f"{self.verb} {args['path']}"

    async def check(self, args: dict[str, Any], ctx: ToolContext) -> None:
        """Refuse a path outside the work dir before anyone is asked. On the event loop:
        resolving one path is a few lstat calls on the local work dir, cheaper than a
        thread hop (the tool's run confines the path again, when it acts)."""
        reach(ctx, args["path"], write=self.writes)


_PATH = Param("path", str, description="Path relative to the work dir.")


class ReadFileTool(_PathTool):
    """Read a text file from the work dir."""

    name = "read_file"
    verb = "Read"
    capability = "fs.read"
    description = "Read a text file inside the work dir (long files are truncated)."
    params: tuple[Param, ...] = (_PATH,)
    risk = RiskClass.READ

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        if ctx.output_limit < INLINE_BYTES:  # it reads at most output_limit + 1 bytes
            return self._read(args["path"], ctx)
        return await asyncio.to_thread(self._read, args["path"], ctx)

    def _read(self, raw: str, ctx: ToolContext) -> dict[str, Any]:
        real = reach(ctx, raw)
        if real.is_dir():
            raise ToolError(f"read_file: {raw!r} is a directory (use list_dir)")
        if real.exists() and not real.is_file():
            # A FIFO or device would block the worker thread forever or stream without end.
            raise ToolError(f"read_file: {raw!r} is not a regular file")
        try:
            with open(real, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                # One byte more than the limit tells us whether anything was left out.
                data = fh.read(ctx.output_limit + 1)
        except OSError as exc:
            raise _os_error(self.name, raw, exc) from exc
        truncated = len(data) > ctx.output_limit
        return {
            "path": _rel(ctx.work_dir, real),
            "content": decode_prefix(data[: ctx.output_limit], truncated=truncated),
            "size": size,
            "truncated": truncated,
        }


class ListDirTool(_PathTool):
    """List a directory of the work dir."""

    name = "list_dir"
    verb = "Read"
    capability = "fs.read"
    description = "List the entries of a directory inside the work dir ('.' is the work dir)."
    params: tuple[Param, ...] = (
        Param("path", str, description="Directory relative to the work dir ('.')."),
    )
    risk = RiskClass.READ

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        raw = args["path"]
        real = reach(ctx, raw)  # once: the listing below uses its result
        if _small_dir(real):
            return self._list(raw, real, ctx)
        return await asyncio.to_thread(self._list, raw, real, ctx)

    def _list(self, raw: str, real: Path, ctx: ToolContext) -> dict[str, Any]:
        try:
            with os.scandir(real) as it:
                found = sorted(it, key=lambda e: e.name)
            entries = [_describe(e) for e in found[:MAX_DIR_ENTRIES]]
        except NotADirectoryError as exc:
            raise ToolError(f"list_dir: {raw!r} is not a directory") from exc
        except OSError as exc:
            raise _os_error(self.name, raw, exc) from exc
        return {
            "path": _rel(ctx.work_dir, real),
            "entries": entries,
            "truncated": len(found) > MAX_DIR_ENTRIES,
        }


def _small_dir(real: Path) -> bool:
    """True when a directory is small enough to list on the event loop: its size on disk
    (which grows with its entries) is at most INLINE_BYTES. Anything unexpected (not
    there, not a directory) says True: the listing reports it at once."""
    try:
        return real.stat().st_size <= INLINE_BYTES
    except OSError:
        return True


def _describe(entry: os.DirEntry[str]) -> dict[str, Any]:
    """One listing row; symlinks are reported as such, never followed."""
    if entry.is_symlink():
        return {"name": entry.name, "type": "symlink"}
    if entry.is_dir(follow_symlinks=False):
        return {"name": entry.name, "type": "dir"}
    if entry.is_file(follow_symlinks=False):
        return {"name": entry.name, "type": "file", "size": entry.stat().st_size}
    return {"name": entry.name, "type": "other"}


class WriteFileTool(_PathTool):
    """Create or replace a text file in the work dir."""

    name = "write_file"
    verb = "Write file"
    content = ("content",)
    capability = "fs.write"
    description = "Write text to a file inside the work dir, creating parent directories."
    params: tuple[Param, ...] = (
        _PATH,
        Param("content", str, description="The full new text of the file."),
    )
    risk = RiskClass.DRAFT
    writes = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        if len(args["content"]) * 4 <= INLINE_BYTES:  # at most 4 bytes a character
            return self._write(args["path"], args["content"], ctx)
        return await asyncio.to_thread(self._write, args["path"], args["content"], ctx)

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview | None:
        """A unified diff of the file as it is now against the new content ("new file"
        when there is none), bounded for a card."""
        return write_preview(ctx, args["path"], args["content"])

    def _write(self, raw: str, content: str, ctx: ToolContext) -> dict[str, Any]:
        real = reach(ctx, raw, write=True)
        if real.is_dir():
            raise ToolError(f"write_file: {raw!r} is a directory")
        data = content.encode("utf-8")
        existed = real.exists()
        try:
            # confine() resolved the parents inside the work dir, so creating them is safe.
            real.parent.mkdir(parents=True, exist_ok=True)
            _write_new_content(raw, real, data, ctx)
        except OSError as exc:
            raise _os_error(self.name, raw, exc) from exc
        return {"path": _rel(ctx.work_dir, real), "bytes": len(data), "created": not existed}


def _write_new_content(raw: str, real: Path, data: bytes, ctx: ToolContext) -> None:
    """Open without following a symlink and without truncating, look at what was opened
    (a hard link swapped in after the check is refused untouched), then replace it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(real, flags, 0o666)
    except OSError as exc:
        if os.path.islink(real):  # O_NOFOLLOW's ELOOP: a symlink appeared since the check
            raise PathEscape(f"path {raw!r} is a symlink; the tools write only the file "
                             f"itself") from exc
        raise
    with os.fdopen(fd, "wb") as fh:
        reason = ctx.protected.opened(os.fstat(fd))
        if reason:
            raise PathEscape(f"path {raw!r} {reason}; the tools may not touch it")
        fh.truncate(0)
        fh.write(data)


class DeleteFileTool(_PathTool):
    """Delete one file (or symlink) in the work dir."""

    name = "delete_file"
    verb = "Delete file"
    capability = "fs.delete"
    description = "Delete a file inside the work dir (directories are refused)."
    params: tuple[Param, ...] = (_PATH,)
    risk = RiskClass.DESTRUCTIVE
    writes = True

    async def check(self, args: dict[str, Any], ctx: ToolContext) -> None:
        """As every file tool, but a symlink is deleted itself (like `rm`)."""
        self._victim(args["path"], ctx)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return self._delete(args["path"], ctx)  # one unlink: on the loop

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview | None:
        """What the unlink would remove as it is now: a file's size, lines and last
        change, a symlink's target, or that there is nothing there. Facts, never the
        file's content: a card may go to a team channel, and the person decides on the
        path, which the card already shows whole."""
        try:
            victim = self._victim(args["path"], ctx)
        except ToolError:
            return None  # the check refuses it before anyone is asked
        return delete_preview(victim, normalize_path(ctx.work_dir, args["path"]))

    def _victim(self, raw: str, ctx: ToolContext) -> Path:
        """What the unlink removes: a symlink itself (its target confined and unprotected
        all the same), else the file, which may not be protected or hard-linked."""
        entry = _entry(ctx.work_dir, raw)
        real = confine(ctx.work_dir, raw)
        ctx.protected.refuse(raw, real, write=True)
        return entry if entry.is_symlink() else real

    def _delete(self, raw: str, ctx: ToolContext) -> dict[str, Any]:
        victim = self._victim(raw, ctx)
        rel = normalize_path(ctx.work_dir, raw)
        if victim.is_dir():
            raise ToolError(f"delete_file: {raw!r} is a directory; only files are deleted")
        try:
            victim.unlink()
        except OSError as exc:
            raise _os_error(self.name, raw, exc) from exc
        return {"path": rel, "deleted": True}


def delete_preview(victim: Path, rel: str) -> Preview:
    """`DeleteFileTool.preview` of ``victim`` (the entry the unlink removes), ``rel`` as
    the card names it."""
    label = f"Deletes {rel}"
    try:
        info = victim.lstat()
    except FileNotFoundError:
        return Preview(label=label, kind="text",
                       text="(no such file now: the step fails unless an earlier step of "
                       "the task creates it)")
    except OSError as exc:
        return Preview(label=label, kind="text",
                       text=f"(cannot be looked at: {exc.strerror or exc})")
    changed = datetime.fromtimestamp(info.st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(victim)
        except OSError:
            target = "?"
        return Preview(label=label, kind="text",
                       text=f"a symbolic link to {target}: the link is deleted, not what it "
                       f"points to\nlast changed {changed}")
    if stat.S_ISDIR(info.st_mode):
        return Preview(label=label, kind="text",
                       text="(a directory: delete_file refuses it)")
    if not stat.S_ISREG(info.st_mode):
        return Preview(label=label, kind="text",
                       text=f"a special file (not a regular file)\nlast changed {changed}")
    size = f"{info.st_size:,} byte{'s' if info.st_size != 1 else ''}"
    return Preview(label=label, kind="text",
                   text=f"{_described(victim, size)}\nlast changed {changed}")


def _described(path: Path, size: str) -> str:
    """``size``, with what the file holds when it is small enough to read: its lines of
    UTF-8 text, or that it is not text. Opened without blocking or following a link, and
    read only if it is still a regular file: it may have been swapped for a FIFO since
    its lstat, and a preview must never hang a thread on one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return size
            data = fh.read(DIFF_INPUT + 1)
    except OSError as exc:
        return f"{size} (cannot be read: {exc.strerror or exc})"
    if len(data) > DIFF_INPUT:
        return size
    try:
        lines = len(data.decode("utf-8").splitlines())
    except UnicodeDecodeError:
        return f"{size}, not UTF-8 text"
    return f"{size} of text, {lines:,} line{'s' if lines != 1 else ''}"


def write_preview(ctx: ToolContext, raw: str, content: str) -> Preview | None:
    """What writing ``content`` to ``raw`` changes, as a unified diff (difflib) of the file
    as it is at this moment; None for a path that cannot be written (the check refuses it).
    """
    try:
        real = reach(ctx, raw, write=True)
    except ToolError:
        return None
    rel = normalize_path(ctx.work_dir, raw)
    if real.is_dir():
        return None
    if not real.exists():
        text, cut = bounded(_diff("", content, "/dev/null", f"b/{rel}"))
        return Preview(label=f"New file {rel}", text=text, kind="diff", cut=cut)
    try:
        with open(real, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(DIFF_INPUT + 1)
    except OSError as exc:
        return Preview(label=f"Replaces {rel}", text=f"(the current file cannot be read: "
                       f"{exc.strerror or exc})", kind="text")
    if len(data) > DIFF_INPUT:
        return Preview(label=f"Replaces {rel}", kind="text",
                       text=f"(the current file is {size} bytes: too large to compare)")
    try:
        current = data.decode("utf-8")
    except UnicodeDecodeError:
        return Preview(label=f"Replaces {rel}", kind="text",
                       text=f"(the current file is not UTF-8 text, {size} bytes)")
    if current == content:
        return Preview(label=f"Changes to {rel}", kind="text",
                       text="(no change: the file already has this content)")
    text, cut = bounded(_diff(current, content, f"a/{rel}", f"b/{rel}"))
    return Preview(label=f"Changes to {rel}", text=text, kind="diff", cut=cut)


def _diff(old: str, new: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=before, tofile=after)
    # A file without a final newline would glue two diff lines together.
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)
