"""A READ tool that does nothing, so a benchmark measures signoff's own overhead only.

Benchmarks that build a node in-process register `NoopTool` directly; those that start
``signoff daemon start`` expose it as a tool plug-in (entry point group
``signoff.tools``) through `plugin_path`, the way an installed package would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from signoff.runtime.models import RiskClass
from signoff.runtime.tools.base import Param, ToolContext


class NoopTool:
    """A READ tool that does nothing (so only signoff's own overhead is measured)."""

    name = "noop"
    capability = "bench.noop"
    description = "Does nothing."
    params: tuple[Param, ...] = (Param("n", int, required=False),)

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.READ

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return ()

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {}


def plugin_path(root: Path) -> str:
    """A ``PYTHONPATH`` under which a daemon loads `NoopTool` as the plug-in tool ``noop``:
    this directory (the module) and a distribution's metadata, written under ``root``."""
    info = root / "signoff_bench_noop-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: signoff-bench-noop\n"
                                   "Version: 0.0\n")
    (info / "entry_points.txt").write_text("[signoff.tools]\nnoop = noop_tool:NoopTool\n")
    return f"{Path(__file__).resolve().parent}:{root}"
