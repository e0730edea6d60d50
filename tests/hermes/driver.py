"""Run inside Hermes Agent's own virtualenv: load plugins with Hermes' loader and answer,
for each JSON line on stdin ({"tool", "args", "session", "call"}), with what Hermes' own
`resolve_pre_tool_block` says ({"call", "block"}; block is None when the call may run).

The first line printed describes the loaded plugins, so the test can check that Hermes
itself found and enabled ours.
"""

from __future__ import annotations

import json
import sys

from hermes_cli import plugins


def main() -> None:
    plugins.discover_plugins()
    listed = plugins.get_plugin_manager().list_plugins()
    print(json.dumps({"plugins": listed}, default=str), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        call = json.loads(line)
        block = plugins.resolve_pre_tool_block(
            call["tool"], call["args"], task_id="task-1", session_id=call["session"],
            tool_call_id=call["call"])
        print(json.dumps({"call": call["call"], "block": block}), flush=True)


if __name__ == "__main__":
    main()
