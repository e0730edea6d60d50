"""The names signoff promises to importers: the package root and the plug-in face."""

from __future__ import annotations

import importlib

import pytest

import signoff
import signoff.plugin

ROOT = {"Action", "Agent", "Planner", "RiskClass", "__version__"}
PLUGIN = {
    "Actor", "ApprovalCard", "BadArguments", "CardRef", "DecisionEvent", "DecisionHandler",
    "DecisionOutcome",
    "NonEmpty", "Param", "PlatformError", "PlatformRejected", "PlatformUnavailable",
    "Preview", "PreviewTool", "RateLimited", "RiskClass", "Route", "Scope", "Section", "Surface",
    "SurfaceDeps", "SurfacePlugin", "Tool", "ToolContext", "ToolError", "problem",
}


def test_package_root_offers_exactly_its_documented_names() -> None:
    """`from signoff import Agent, Action, RiskClass, Planner` and the version keep working."""
    assert set(signoff.__all__) == ROOT
    for name in ROOT:
        assert getattr(signoff, name) is not None


def test_root_agent_is_the_embeddable_agent() -> None:
    """`signoff.Agent` is the embeddable agent, loaded only when asked for."""
    from signoff.embed import Agent

    assert signoff.Agent is Agent
    with pytest.raises(AttributeError):
        _ = signoff.NoSuchName  # type: ignore[attr-defined]


def test_version_has_one_source() -> None:
    """The version the root shows is the one in `signoff._version`."""
    assert signoff.__version__ == importlib.import_module("signoff._version").__version__


def test_plugin_face_offers_exactly_its_documented_names() -> None:
    """A surface or tool package finds every name it needs in `signoff.plugin`."""
    assert set(signoff.plugin.__all__) == PLUGIN
    for name in PLUGIN:
        assert getattr(signoff.plugin, name) is not None


def test_plugin_face_names_are_the_inside_ones() -> None:
    """The face re-exports signoff's own classes, so a plug-in built on it is the real thing."""
    from signoff.bot.ports import Surface
    from signoff.runtime.tools.base import Tool

    assert signoff.plugin.Surface is Surface
    assert signoff.plugin.Tool is Tool
