"""`signoff claude-hook`: Claude Code's ``PreToolUse`` command hook, decided by signoff.

Claude Code runs the hook once per tool call, with the call as JSON on stdin, and reads
``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": …,
"permissionDecisionReason": …}}`` from stdout. Claude gives a hook about a minute, while a
person may answer from a phone half an hour later, so:

* what the policy or a live grant settles (READ, a Session/Always answer) is answered
  ``allow`` or ``deny`` at once;
* anything else is asked (``POST /v1/approvals``, policy_id = Claude's session id) and
  waited for; still pending when ``--wait`` runs out, the hook answers ``deny`` saying so,
  and the request stays open. When Claude makes the same call again in that session (a
  retry, or after ``claude -p --resume <session>``) the hook finds the request it asked
  (kept by session and exact call in a small file of the user's, see `Asked`) and
  answers what the person decided, consuming a Once;
* the daemon unreachable, slow, a refused key, bad input: ``deny``, never ``allow``.

Never ``defer`` and never a late answer, because Claude Code runs the call through its
own permission flow (which ``bypassPermissions``, an allow rule or a person at its
terminal lets through, none of them signoff's approver) whenever a hook's answer does not
stop it: ``defer`` is ignored in an interactive session, when the model made several tool
calls at once, and by Claude Code before 2.1.89; a hook that outlives its ``timeout`` is
killed and counts as a non-blocking error. So ``--wait`` bounds the whole hook (every
call to the daemon included), and keep it below the hook's ``timeout``.

The tool mapping is the one `signoff mcp-permission` uses (`signoff.cli.claude_tools`).
The hook starts no MCP SDK and no wiring: it is a process per tool call.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import select
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signoff.cli.claude_tools import ask_for, call_digest
from signoff.client import Decision, SignoffSync
from signoff.runtime.bounds import MAX_BYTES, OutOfBounds, parse_json


@dataclass(frozen=True)
class HookCall:
    """The parts of Claude Code's PreToolUse input the hook uses."""

    session_id: str
    cwd: Path
    tool_name: str
    tool_input: dict[str, Any]

    @classmethod
    def parse(cls, text: str) -> HookCall:
        """Claude's hook JSON; ValueError naming what is missing or wrong."""
        try:
            data = parse_json(text, "hook input")
        except OutOfBounds as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(data, dict):
            raise ValueError("hook input is not a JSON object")
        event = data.get("hook_event_name", "PreToolUse")
        if event != "PreToolUse":
            raise ValueError(f"hook_event_name is {event!r}: signoff claude-hook is a "
                             "PreToolUse hook")
        session, tool, args = data.get("session_id"), data.get("tool_name"), data.get(
            "tool_input", {})
        if not isinstance(session, str) or not session:
            raise ValueError("session_id is missing")
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool_name is missing")
        if not isinstance(args, dict):
            raise ValueError("tool_input is not an object")
        return cls(session_id=session, cwd=Path(str(data.get("cwd") or os.getcwd())),
                   tool_name=tool, tool_input=args)

    def digest(self) -> str:
        """This exact call in this session (what a resumed run asks about again)."""
        return call_digest(self.session_id, self.tool_name, self.tool_input)


class Asked:
    """Requests asked and not yet answered to Claude (the Idempotency-Key each was asked
    with), by call digest, in one small JSON file per session under
    ``$XDG_STATE_HOME/signoff/claude-hook`` (the user's own, 0600): the hook is a new
    process for every call, and a call left pending is made again later."""

    def __init__(self, session_id: str, root: Path | None = None) -> None:
        base = root or Path(os.environ.get("XDG_STATE_HOME")
                            or Path.home() / ".local" / "state") / "signoff" / "claude-hook"
        name = hashlib.sha256(session_id.encode()).hexdigest()[:32]
        self.path = base / f"{name}.json"

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, digest: str) -> str | None:
        return self._read().get(digest)

    def put(self, digest: str, approval_id: str | None) -> None:
        data = self._read()
        if approval_id is None:
            data.pop(digest, None)
        else:
            data[digest] = approval_id
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(tmp, self.path)


# Marks a request another hook process is waiting on right now (see `answer`).
LIVE = "live:"
# Past ``--wait``, how long the last answer from the daemon (a long poll that ends at the
# deadline) may take to arrive before the hook answers deny without it.
GRACE = 2.0


def output(decision: str, reason: str) -> dict[str, Any]:
    """Claude Code's PreToolUse answer."""
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                   "permissionDecision": decision,
                                   "permissionDecisionReason": reason}}


def answer(call: HookCall, client: SignoffSync, asked: Asked, deadline: float
           ) -> dict[str, Any]:
    """Ask (or take up the request an earlier answer left pending), wait until
    ``deadline`` (`time.monotonic`) at most, then answer.

    The file remembers, per call, the ``Idempotency-Key`` its request was asked with,
    not the request's id: asking again with that key returns the same request only for
    the same tool and arguments (the daemon binds a key to its request, 422 otherwise).
    The file lies where Claude itself may write, so an id there could point this call
    at a harmless request someone approved; a key can only lead to this call's own
    request or to a new one a person is asked about."""
    digest = call.digest()
    request = ask_for(call.tool_name, call.tool_input, call.cwd).request()
    goal = f"Claude Code wants to use {call.tool_name} in {call.cwd}"
    earlier = asked.get(digest)
    decision: Decision | None = None
    key = ""
    # Only a request an earlier answer left pending is taken up again. One still being
    # waited on by another hook (Claude may run two identical calls at once) is that
    # call's: sharing it, one Once would let both run.
    if earlier is not None and not earlier.startswith(LIVE):
        key = earlier
        decision = client.request(policy_id=call.session_id, wait=False, goal=goal,
                                  idempotency_key=key, **request)
        if decision.status in ("expired", "error"):
            decision = None  # ran out (or the key is not ours): a new request
    if decision is None:
        key = f"claude-hook-{digest[:32]}-{secrets.token_hex(8)}"
        decision = client.request(policy_id=call.session_id, wait=False, goal=goal,
                                  idempotency_key=key, **request)
    if decision.pending and decision.id:
        asked.put(digest, LIVE + key)
        decision = client.wait(decision.id, timeout=max(0.0, deadline - time.monotonic()))
    return _settled(call, decision, asked, digest, key)


def _settled(call: HookCall, decision: Decision, asked: Asked, digest: str,
             key: str) -> dict[str, Any]:
    if decision.pending:
        asked.put(digest, key)  # left for the same call, made again, to take up
        return output("deny", f"still pending in signoff (request {decision.id}), so it did "
                              f"not run: once a person has approved it there, make this "
                              f"exact call again (in this session, or after resuming it)")
    asked.put(digest, None)
    if decision.approved:
        return output("allow", f"approved in signoff: {decision.describe()}")
    return output("deny", f"not approved in signoff: {decision.describe()}")


def run_hook(text: str, *, url: str | None, api_key: str | None, wait: float,
             state_root: Path | None = None) -> dict[str, Any]:
    """The whole hook, in at most ``wait`` seconds (and `GRACE`): never raises, never
    answers allow on a failure, and answers deny when the daemon is too slow."""
    try:
        call = HookCall.parse(text)
    except ValueError as exc:
        return output("deny", f"signoff claude-hook: bad hook input: {exc}")
    deadline = time.monotonic() + max(wait, 0.0)
    answered: list[dict[str, Any]] = []
    done, told = os.pipe()

    def work() -> None:
        try:
            answered.append(_answer(call, url=url, api_key=api_key, deadline=deadline,
                                    state_root=state_root))
            with contextlib.suppress(OSError):  # the hook may have answered without it
                os.write(told, b".")
        finally:
            os.close(told)

    # A thread, so that no connect, read or retry of the daemon can hold the answer past
    # the deadline; it is a daemon thread, left behind when the process ends. The wait is
    # a select() on a pipe the thread writes when it is done, not Thread.join(timeout):
    # select's timeout is relative, where a timed lock (join) computes its deadline on
    # the process's clock and waits for it on the kernel's, which never meet when the
    # clock is shifted (libfaketime: the CI's run 400 days ahead hung there).
    worker = threading.Thread(target=work, name="signoff-claude-hook", daemon=True)
    worker.start()
    try:
        select.select([done], [], [], max(wait, 0.0) + GRACE)
    finally:
        os.close(done)
    if answered:
        return answered[0]
    return output("deny", f"signoff did not answer within {wait:g}s (--wait), so the call "
                          f"did not run")


def _answer(call: HookCall, *, url: str | None, api_key: str | None, deadline: float,
            state_root: Path | None) -> dict[str, Any]:
    try:
        with SignoffSync(url, api_key=api_key, requester=f"claude-code:{call.session_id}",
                         retries=1) as client:
            return answer(call, client, Asked(call.session_id, state_root), deadline)
    except Exception as exc:  # fail closed on anything unforeseen
        return output("deny", f"signoff claude-hook failed: {type(exc).__name__}: {exc}")


def main(*, url: str | None, api_key: str | None, wait: float) -> None:
    """Read stdin, print the answer, exit 0 (Claude reads the JSON)."""
    text = sys.stdin.read(MAX_BYTES + 1)
    print(json.dumps(run_hook(text, url=url, api_key=api_key, wait=wait)))
