"""A small MCP server for the tests, built on the `mcp` SDK's own `MCPServer`: one tool
with an effect (``write_note`` appends a line to a file), one prompt and two resources
(a fixed one and a template), the parts `mcp-gate` passes through read-only.

Run as ``python tests/mcp_notes_server.py NOTES_FILE`` (stdio)."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

NOTES = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("notes.txt")
server = MCPServer("notes")


@server.tool()
def write_note(text: str) -> str:
    """Append a line to the notes file."""
    with NOTES.open("a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return f"noted: {text}"


@server.prompt()
def review(topic: str) -> str:
    """Ask for a review of a topic."""
    return f"Please review {topic} carefully."


@server.resource("notes://readme")
def readme() -> str:
    """What the notes server is."""
    return "the notes server keeps notes"


@server.resource("notes://day/{day}")
def day(day: str) -> str:
    """The notes of one day."""
    return f"notes of {day}"


if __name__ == "__main__":
    server.run()
