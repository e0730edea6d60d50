"""The one place that reads settings and builds a signoff node from them.

Everything else takes keyword-only constructor arguments; only this package knows which
setting goes where. It builds in dependency order and gives each object what it needs
as a constructor argument, never by setting an attribute afterwards (a test checks).
By concern:

- `signoff.wiring.state`: the state dir, the node id, the files the tools may not touch;
- `signoff.wiring.node`: store, tools, policy, engine, worker, decider, approval flow
  (`build_node`: what `signoff handle` and the embedded Agent run);
- `signoff.wiring.surfaces`: the chat surfaces and the ports they are given;
- `signoff.wiring.cluster`: leadership, replay ledger, heartbeat, wake-ups, reminders;
- `signoff.wiring.api`: the API's keys, roles, context and providers;
- `signoff.wiring.daemon`: all of it for `signoff daemon start` (`assemble`).
"""

from __future__ import annotations

from signoff.wiring.api import (
    api_context,
    api_keys,
    api_providers,
    api_roles,
    forget_stale_subscriptions,
)
from signoff.wiring.cluster import (
    ClusterPorts,
    build_reminder,
    cluster_ports,
    cluster_services,
    sa_backend,
)
from signoff.wiring.node import (
    Node,
    allowed_scope_names,
    build_agent,
    build_node,
    build_planner,
    build_policy,
    build_registry,
    build_tools,
    load_node,
    mcp_specs,
    net_rule,
)
from signoff.wiring.state import node_id, prepare_state, protected_files
from signoff.wiring.surfaces import (
    PendingCards,
    SurfacePoster,
    build_surfaces,
    channel_forms,
    surface_name,
)

__all__ = [
    "ClusterPorts",
    "Node",
    "PendingCards",
    "SurfacePoster",
    "allowed_scope_names",
    "api_context",
    "api_keys",
    "api_providers",
    "api_roles",
    "build_agent",
    "build_node",
    "build_planner",
    "build_policy",
    "build_registry",
    "build_reminder",
    "build_surfaces",
    "build_tools",
    "channel_forms",
    "cluster_ports",
    "cluster_services",
    "forget_stale_subscriptions",
    "load_node",
    "mcp_specs",
    "net_rule",
    "node_id",
    "prepare_state",
    "protected_files",
    "sa_backend",
    "surface_name",
]
