"""What cards preview (the PreviewTool hook): write_file diffs, run_command in full, the
generic argument preview of MCP tools, and the bounds every preview keeps."""

from __future__ import annotations

import os
from pathlib import Path

from signoff.runtime.models import Action
from signoff.runtime.tools import ToolContext, builtin_registry
from signoff.runtime.tools.base import (
    PREVIEW_CHARS,
    PREVIEW_LINES,
    Preview,
    args_preview,
    bounded,
)


def ctx(work: Path) -> ToolContext:
    return ToolContext(work_dir=work)


async def preview(work: Path, tool: str, **args: object) -> Preview | None:
    registry = builtin_registry(work_dir=work, entry_points_group=None)
    return await registry.preview(Action(tool=tool, args=args), ctx(work))


async def test_write_file_shows_a_unified_diff_of_the_file_as_it_is(tmp_path: Path) -> None:
    """The diff is against what is on disk when the card is built."""
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n")
    shown = await preview(tmp_path, "write_file", path="./notes.txt",
                          content="one\nTWO\nthree\n")
    assert shown is not None and shown.kind == "diff" and not shown.cut
    assert shown.label == "Changes to notes.txt"
    lines = shown.text.splitlines()
    assert lines[:2] == ["--- a/notes.txt", "+++ b/notes.txt"]
    assert "-two" in lines and "+TWO" in lines and " one" in lines
    (tmp_path / "notes.txt").write_text("one\nTWO\nthree\n")
    again = await preview(tmp_path, "write_file", path="notes.txt", content="one\nTWO\nthree\n")
    assert again is not None and "no change" in again.text


async def test_write_file_to_a_new_file_says_new_file(tmp_path: Path) -> None:
    """No file yet: "New file …" and every line added; a missing final newline is said."""
    shown = await preview(tmp_path, "write_file", path="sub/new.txt", content="a\nb")
    assert shown is not None and shown.label == "New file sub/new.txt"
    assert shown.text.splitlines()[:2] == ["--- /dev/null", "+++ b/sub/new.txt"]
    assert "+a" in shown.text and "\\ No newline at end of file" in shown.text
    assert not (tmp_path / "sub").exists(), "a preview touches nothing"


async def test_a_long_diff_is_cut_and_says_so(tmp_path: Path) -> None:
    """A big change is bounded in lines and characters; its last line says what is left."""
    shown = await preview(tmp_path, "write_file", path="big.txt",
                          content="".join(f"line {n}\n" for n in range(1000)))
    assert shown is not None and shown.cut
    lines = shown.text.splitlines()
    assert len(lines) <= PREVIEW_LINES + 1 and len(shown.text) <= PREVIEW_CHARS
    assert lines[-1].startswith("… ") and lines[-1].endswith("more lines not shown")


async def test_binary_or_unreadable_targets_are_described_not_diffed(tmp_path: Path) -> None:
    """A non-UTF-8 file is named as such; a path outside the work dir has no preview."""
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00")
    shown = await preview(tmp_path, "write_file", path="blob.bin", content="x")
    assert shown is not None and "not UTF-8" in shown.text
    assert await preview(tmp_path, "write_file", path="../out.txt", content="x") is None


async def test_run_command_shows_the_whole_command_and_its_cwd(tmp_path: Path) -> None:
    """The title shortens a long command; the preview never does."""
    (tmp_path / "src").mkdir()
    command = "git commit -m 'a long message that a title would cut' --author x " + "a" * 150
    shown = await preview(tmp_path, "run_command", command=command, cwd="src")
    assert shown is not None and shown.label == "Command" and not shown.cut
    assert shown.text == f"$ {command}\n(in src)"
    plain = await preview(tmp_path, "run_command", command="ls")
    assert plain is not None and plain.text == "$ ls\n(in the work dir)"


async def test_tools_without_the_hook_have_no_preview(tmp_path: Path) -> None:
    """read_file says nothing more than its card; bad arguments give None, not an error."""
    assert await preview(tmp_path, "read_file", path="x") is None
    assert await preview(tmp_path, "write_file", path=3) is None


async def test_a_tool_the_registry_does_not_know_shows_its_arguments(tmp_path: Path) -> None:
    """An outside request's own tool (Claude Code's Bash) shows every argument in full."""
    command = "rm -rf build && make -j8 all " + "x" * 200
    shown = await preview(tmp_path, "Bash", command=command)
    assert shown is not None and shown.label == "Arguments" and command in shown.text
    assert await preview(tmp_path, "Bash") is None


def test_generic_argument_preview_leaves_content_out() -> None:
    """MCP tools show their arguments in full as JSON, content arguments excepted."""
    shown = args_preview({"repo": "/r", "message": "hi", "files": ["a", "b"]}, ("message",))
    assert shown is not None and shown.label == "Arguments"
    assert '"repo": "/r"' in shown.text and "message" not in shown.text
    assert args_preview({"message": "hi"}, ("message",)) is None


def test_bounded_keeps_whole_lines() -> None:
    """Short text passes whole; a long line is shortened and the block says so."""
    assert bounded("a\nb") == ("a\nb", False)
    text, cut = bounded("x" * 5000)
    assert cut and len(text) <= PREVIEW_CHARS and text.endswith("(long lines shortened)")


async def test_delete_file_says_what_is_there_now_without_its_content(tmp_path: Path) -> None:
    """A text file: its size, lines and last change; never a word of what it holds (a
    card may go to a team channel)."""
    (tmp_path / "keep.txt").write_text("the launch codes\nline two\n")
    shown = await preview(tmp_path, "delete_file", path="./keep.txt")
    assert shown is not None and shown.label == "Deletes keep.txt" and not shown.cut
    first, changed = shown.text.splitlines()
    assert first == "26 bytes of text, 2 lines"
    assert changed.startswith("last changed ") and changed.endswith(" UTC")
    assert "launch" not in shown.text
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00")
    blob = await preview(tmp_path, "delete_file", path="blob.bin")
    assert blob is not None and blob.text.splitlines()[0] == "3 bytes, not UTF-8 text"


async def test_delete_file_of_nothing_a_link_or_a_fifo(tmp_path: Path) -> None:
    """No file: the card says so. A symlink: the link goes, not its target. A FIFO is
    named, never opened (a preview must not hang on one). Outside the work dir: none."""
    gone = await preview(tmp_path, "delete_file", path="nope.txt")
    assert gone is not None and gone.text.startswith("(no such file now")
    (tmp_path / "target.txt").write_text("x")
    (tmp_path / "link").symlink_to("target.txt")
    link = await preview(tmp_path, "delete_file", path="link")
    assert link is not None
    assert link.text.startswith("a symbolic link to target.txt: the link is deleted")
    os.mkfifo(tmp_path / "pipe")
    fifo = await preview(tmp_path, "delete_file", path="pipe")
    assert fifo is not None and fifo.text.startswith("a special file")
    assert await preview(tmp_path, "delete_file", path="../elsewhere.txt") is None
    assert (tmp_path / "target.txt").exists() and (tmp_path / "link").is_symlink()
