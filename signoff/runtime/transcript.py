"""An agent task's conversation with its model, one stored entry per message.

A transcript is append-only: each entry is its own row, keyed by (task id, seq), written
in the same unit of work (`Change.transcript`) as whatever else a turn changes. Appending
never rewrites earlier entries, so a turn costs the same at turn 50 as at turn 1, and the
unique key makes two writers of the same turn lose cleanly (one commit wins).

``meta`` holds what the loop needs after a restart and the model never sees: the action
record of a tool call, the fingerprint of a refused call, the finish reason.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from signoff.runtime.models import JsonDict

# What the API, the CLI and the console show of a tool's output (the model saw more:
# see engine.agent.OUTPUT_CHARS).
DISPLAY_CHARS = 1_000


def shorten_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


class TranscriptEntry(BaseModel):
    """One message of the conversation, in the OpenAI chat format plus bookkeeping."""

    task_id: str
    seq: int  # 0-based place in the task's transcript
    role: str  # system | user | assistant | tool
    content: str | None = None
    tool_calls: list[JsonDict] | None = None  # as the model sent them (arguments: a string)
    tool_call_id: str | None = None
    at: datetime | None = None  # set when made (the node's Clock), else by the store
    meta: JsonDict = Field(default_factory=dict)

    def message(self) -> JsonDict:
        """The message as the model is sent it."""
        out: JsonDict = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    def public(self, *, limit: int = DISPLAY_CHARS) -> JsonDict:
        """The contract's transcript item (tool outputs shortened)."""
        content = self.content
        if self.role == "tool" and content is not None:
            content = shorten_text(content, limit)
        item: JsonDict = {"role": self.role, "content": content,
                          "at": self.at.isoformat() if self.at else None}
        if self.tool_calls:
            item["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            item["tool_call_id"] = self.tool_call_id
        return item

    def calls(self) -> list[JsonDict]:
        """The tool calls of an assistant message (empty for any other)."""
        return list(self.tool_calls or []) if self.role == "assistant" else []


def call_summary(call: JsonDict, limit: int = 200) -> str:
    """``name(arguments)`` of one tool call, shortened, for people to read."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return shorten_text(f"{fn.get('name', '?')}({' '.join(str(text).split())})", limit)


def dump(entry: TranscriptEntry) -> str:
    """The stored JSON text of an entry."""
    return entry.model_dump_json()


def load(text: str | bytes) -> TranscriptEntry:
    """An entry from its stored JSON text."""
    return TranscriptEntry.model_validate_json(text)


def as_dicts(entries: list[TranscriptEntry]) -> list[dict[str, Any]]:
    """The messages of ``entries``, for a chat completions request."""
    return [e.message() for e in entries]
