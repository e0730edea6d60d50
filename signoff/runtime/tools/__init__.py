"""Built-in tools and the tool registry."""

from __future__ import annotations

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.tools.base import (
    ChannelForm,
    CheckedTool,
    MessagePoster,
    Param,
    SmtpSettings,
    Tool,
    ToolContext,
)
from signoff.runtime.tools.builtin.fs import confine
from signoff.runtime.tools.builtin.messaging import parse_channel
from signoff.runtime.tools.registry import ToolRegistry, builtin_registry

__all__ = [
    "ChannelForm",
    "CheckedTool",
    "MessagePoster",
    "Param",
    "SmtpSettings",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "builtin_registry",
    "canonical_json",
    "confine",
    "parse_channel",
    "sha256_hex",
]
