"""`signoff tasks|show|approve|deny|grants`: talk to a running daemon over its HTTP API.

`approve` and `deny` take a task id (``t-…``) or an approval request id (``a-…``, e.g. a
request from an agent that is not ours). For a task they name the request they mean
(``approval_id``: the one given with ``--approval``, else the one the task waits on
when the command looks): if the task has moved on to another request by the time the
answer arrives, the daemon decides nothing (409) instead of approving an action nobody
looked at.

Each command takes ``--url`` (env ``SIGNOFF_URL``, default http://127.0.0.1:8080) and
``--api-key`` (env ``SIGNOFF_API_KEY``). Humans get Rich tables, scripts get ``--json``.
Every failure is one line on stderr: exit 1 for an HTTP error or an unreachable daemon,
2 for usage errors (bad options, a malformed URL).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.text import Text

from signoff._version import __version__
from signoff.cli.tables import Col, Grid
from signoff.runtime.refusals import outcome_words

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT = 10.0


# Consoles are made per use: one reads COLUMNS when it is made, so one made at import
# would keep the width of whatever imported this module first.
def out() -> Console:
    """The console for a command's output."""
    return Console(highlight=False, soft_wrap=True)


def err() -> Console:
    """The console for errors (stderr)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


UrlOpt = Annotated[str, typer.Option("--url", envvar="SIGNOFF_URL",
                                     help="Base URL of the daemon.")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar="SIGNOFF_API_KEY",
                                            show_default=False, help="API key of the daemon.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class StateChoice(enum.StrEnum):
    """Task states accepted by ``--state``."""

    queued = "queued"
    planning = "planning"
    in_progress = "in_progress"
    waiting_approval = "waiting_approval"
    completed = "completed"
    failed = "failed"


class ScopeChoice(enum.StrEnum):
    """Approval scopes accepted by ``--scope``."""

    once = "once"
    session = "session"
    always = "always"


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, then exit."""
    err().print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def _detail(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase, {}
    if isinstance(body, dict):
        return str(body.get("detail", "")), body
    return str(body)[:200], {}


def _explain(response: httpx.Response, *, key: str | None, subject: str | None) -> NoReturn:
    detail, body = _detail(response)
    code = response.status_code
    if code == 401:
        if key:
            fail("the daemon refused the API key (401): check --api-key or SIGNOFF_API_KEY")
        fail("the daemon needs an API key: pass --api-key or set SIGNOFF_API_KEY")
    if code == 403:
        fail(f"not allowed (403): {detail}")
    if code == 404:
        fail(f"no {subject}" if subject else f"not found (404): {detail}")
    if code == 409:
        state = str(body.get("state") or "")
        if not state:
            fail(f"conflict (409): {detail}")
        # Most details name the state already ("task t-1 is failed, not waiting…").
        fail(detail if re.search(rf"\b{re.escape(state)}\b", detail)
             else f"{detail} (state: {state})")
    if code == 422:
        fail(f"invalid request (422): {detail}")
    fail(f"the daemon answered {code}: {detail}")


def call(method: str, url: str, path: str, key: str | None, *, body: Any = None,
         params: dict[str, Any] | None = None, subject: str | None = None) -> Any:
    """One API call; returns the decoded JSON or exits with a clear message."""
    # X-Signoff-Client: decisions made here are audited as coming from the CLI.
    headers = {"Accept": "application/json", "User-Agent": f"signoff-cli/{__version__}",
               "X-Signoff-Client": "cli"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    base = url.rstrip("/")
    try:
        with httpx.Client(base_url=base, timeout=TIMEOUT, headers=headers) as client:
            response = client.request(method, path, json=body, params=params)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        fail(f"--url {url!r} is not a valid http(s) URL ({exc})", code=2)
    except httpx.TimeoutException:
        fail(f"the signoff daemon at {base} did not answer within {TIMEOUT:.0f} s")
    except httpx.TransportError:
        # The URL may be the default while the daemon was started with another port.
        fail(f"cannot reach the signoff daemon at {base}; is it running? (signoff daemon "
             f"start) On another address or port, pass --url or set SIGNOFF_URL")
    if not response.is_success:
        _explain(response, key=key, subject=subject)
    try:
        return response.json()
    except ValueError:
        fail(f"the daemon at {base} did not answer with JSON (is this a signoff daemon?)")


def _dump(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _print_page(page: dict[str, Any], as_json: bool, table: Callable[[list[dict[str, Any]]], Grid],
                empty: str) -> None:
    """A listing as --json has it, else as a table (``empty`` when it has no items)."""
    if as_json:
        _dump(page)
    elif not page["items"]:
        out().print(empty, markup=False)
    else:
        table(page["items"]).print(out())


def _action_text(action: dict[str, Any] | None) -> str:
    if not action:
        return ""
    targets = ", ".join(action.get("targets") or [])
    text = f"{action.get('risk') or '?'} {action.get('tool')}"
    return f"{text} → {targets}" if targets else text


def _when(stamp: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` (UTC, as the API gives it)."""
    return (stamp or "")[:19].replace("T", " ")


def tasks_table(items: list[dict[str, Any]]) -> Grid:
    """Tasks as a table: id, state and time stay whole; goal and pending action fold."""
    grid = Grid(Col("ID"), Col("State"), Col("Goal", whole=False),
                Col("Waiting on", whole=False), Col("Updated (UTC)"))
    for task in items:
        grid.add(task["id"], outcome_words(task["state"], task.get("result")), task["goal"],
                 _action_text(task.get("pending_action")), _when(task.get("updated_at"))[:16])
    return grid


def show_task(task: dict[str, Any]) -> None:
    """A task for people: its fields, the pending action, the history."""
    # Text, not markup: a task's words are not ours to interpret, and the id in bold.
    out().print(Text.assemble((task["id"], "bold"), "  ",
                              outcome_words(task["state"], task.get("result"))))
    out().print(f"goal: {task['goal']}", markup=False)
    if task.get("schedule"):
        out().print(f"schedule: {task['schedule']}", markup=False)
    if task.get("pending_action"):
        approval = task.get("approval") or {}
        out().print(f"waiting on: {_action_text(task['pending_action'])} "
                    f"(approval {approval.get('id')}, expires {_when(approval.get('expires_at'))})",
                    markup=False)
    if task.get("result") is not None:
        out().print(f"result: {json.dumps(task['result'], ensure_ascii=False)[:500]}", markup=False)
    if task.get("actions"):
        grid = Grid(Col("Step"), Col("Tool"), Col("Targets", whole=False), Col("Decision"),
                    Col("By"), Col("Outcome"), title="actions")
        for a in task["actions"]:
            grid.add(str(a["step"]), a["tool"], ", ".join(a.get("targets") or []),
                     a["decision"], a.get("decided_by"), a["outcome"])
        grid.print(out())


def cmd_tasks(state: Annotated[StateChoice | None, typer.Option(help="Only this state.")] = None,
              limit: Annotated[int, typer.Option(min=1, max=500, help="How many.")] = 50,
              as_json: JsonOpt = False, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """List tasks of a running daemon, newest first."""
    params: dict[str, Any] = {"limit": limit}
    if state is not None:
        params["state"] = state.value
    _print_page(call("GET", url, "/tasks", api_key, params=params), as_json, tasks_table,
                "no tasks")


SHOWN = 200  # characters of one message in `show --transcript` (--json has them whole)


def _one_line(text: Any, limit: int = SHOWN) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def show_transcript(items: list[dict[str, Any]]) -> None:
    """An agent's conversation for people: who said what, calls and results shortened."""
    out().print("[bold]conversation[/bold]", markup=True)
    if not items:
        out().print("  (no conversation: this task did not run as an agent)", markup=False)
    for item in items:
        who = item["role"] + (f" {item['tool_call_id']}" if item.get("tool_call_id") else "")
        if item.get("content"):
            out().print(f"  [{who}] {_one_line(item['content'])}", markup=False)
        elif not item.get("tool_calls"):
            out().print(f"  [{who}] (empty)", markup=False)
        for c in item.get("tool_calls") or []:
            fn = c.get("function") or {}
            call_text = f"{fn.get('name')}({fn.get('arguments')})"
            out().print(f"  [{who}] → {_one_line(call_text)}", markup=False)


def transcript_items(url: str, task_id: str, key: str | None) -> list[dict[str, Any]]:
    """Every message of a task's conversation, page by page."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = call("GET", url, f"/tasks/{task_id}/transcript", key, params=params,
                    subject=f"task {task_id}")
        items.extend(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def cmd_show(task_id: Annotated[str, typer.Argument(help="The task id (t-…).")],
             transcript: Annotated[bool, typer.Option(
                 "--transcript", help="Also show an agent task's conversation.")] = False,
             as_json: JsonOpt = False, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """Show one task with its pending action and history (and its conversation)."""
    task = call("GET", url, f"/tasks/{task_id}", api_key, subject=f"task {task_id}")
    items = transcript_items(url, task_id, api_key) if transcript else None
    if as_json:
        _dump(task if items is None else {**task, "transcript": items})
        return
    show_task(task)
    if items is not None:
        show_transcript(items)


IdArg = Annotated[str, typer.Argument(
    help="A task id (t-…) or an approval request id (a-…, e.g. from an outside agent).")]


def _decision_path(ident: str, verb: str) -> tuple[str, str]:
    """Where to send a decision: a request id goes to /approvals, a task id to /tasks."""
    if ident.startswith("a-"):
        return f"/approvals/{ident}/{verb}", f"approval request {ident}"
    return f"/tasks/{ident}/{verb}", f"task {ident}"


def _send_decision(verb: str, ident: str, body: dict[str, Any], approval: str | None,
                   as_json: bool, url: str, api_key: str | None) -> dict[str, Any] | None:
    """POST ``verb`` on a task or request, naming the request the caller looked at; the
    answer, or None once it was printed for --json."""
    path, subject = _decision_path(ident, verb)
    if (seen := seen_approval(url, ident, api_key, approval)) is not None:
        body["approval_id"] = seen
    answer: dict[str, Any] = call("POST", url, path, api_key, body=body, subject=subject)
    if as_json:
        _dump(answer)
        return None
    return answer


ApprovalOpt = Annotated[str | None, typer.Option(
    "--approval", show_default=False,
    help="For a task: the approval request id (a-…) you looked at (signoff show); "
         "default: the one it waits on now.")]


def seen_approval(url: str, ident: str, key: str | None, given: str | None) -> str | None:
    """The approval id a decision on task ``ident`` names: ``given``, else the one the
    task waits on now (None for a request id, or a task that waits on nothing: the
    daemon then says why it cannot decide)."""
    if ident.startswith("a-"):
        return None
    if given is not None:
        return given
    task = call("GET", url, f"/tasks/{ident}", key, subject=f"task {ident}")
    approval = task.get("approval") if isinstance(task, dict) else None
    if isinstance(approval, dict) and approval.get("status") == "pending":
        return str(approval.get("id"))
    return None


def cmd_approve(task_id: IdArg,
                scope: Annotated[ScopeChoice, typer.Option(
                    help="once: this action; session: for this task (or policy_id); "
                         "always: remember.")] = ScopeChoice.once,
                lasts: Annotated[str | None, typer.Option(
                    "--for", help='Session/always only: the grant lapses after this long '
                                  '("30m", "8h", "7d").')] = None,
                approval: ApprovalOpt = None,
                as_json: JsonOpt = False, url: UrlOpt = DEFAULT_URL,
                api_key: KeyOpt = None) -> None:
    """Approve the action a task (or an approval request) is waiting on."""
    body: dict[str, Any] = {"scope": scope.value}
    if lasts is not None:
        body["for"] = lasts
    if (answer := _send_decision("approve", task_id, body, approval, as_json, url,
                                 api_key)) is None:
        return
    if "state" in answer:
        out().print(f"approved {task_id} ({scope.value}); the task is {answer['state']}",
                    markup=False)
    else:
        out().print(f"approved {task_id} ({scope.value}); the request is {answer['status']}",
                    markup=False)


def cmd_deny(task_id: IdArg,
             reason: Annotated[str | None, typer.Option(help="Why (kept in the audit log).")
                               ] = None,
             approval: ApprovalOpt = None,
             as_json: JsonOpt = False, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """Deny the action a task or an approval request is waiting on (the task fails; an
    agent is told and goes on)."""
    if (answer := _send_decision("deny", task_id, {"reason": reason}, approval, as_json, url,
                                 api_key)) is None:
        return
    if "state" in answer:
        why = (answer.get("result") or {}).get("reason", "user denied")
        out().print(f"denied {task_id}; the task is {answer['state']} ({why})", markup=False)
    else:
        out().print(f"denied {task_id}; the request is {answer['status']}", markup=False)


def grant_status(grant: dict[str, Any]) -> str:
    """live, revoked, used, ended, lapsed or superseded, as the daemon says (an older one
    only says live)."""
    return str(grant.get("status") or ("live" if grant["live"] else "not live"))


def grants_table(items: list[dict[str, Any]]) -> Grid:
    """Grants as a table: what each covers (risk, tool → targets), for whom, its status
    (``live until <when>`` for a time-boxed grant, ``lapsed`` once that time is over)."""
    grid = Grid(Col("ID"), Col("Scope"), Col("Covers", whole=False), Col("For"),
                Col("Status"), Col("By"))
    for g in items:
        covers = {"risk": g["risk"], "tool": g["tool"], "targets": g.get("targets") or []}
        status = grant_status(g)
        if g.get("expires_at") and status == "live":
            # Three short lines (minutes are enough), so Covers keeps its room at 80 columns.
            day, _, hhmm = _when(g["expires_at"])[:16].partition(" ")
            status += f" until\n{day}\n{hhmm} UTC"
        grid.add(g["id"], g["scope"], _action_text(covers), g["policy_id"], status,
                 g.get("created_by"))
    return grid


def cmd_grants(revoke: Annotated[str | None, typer.Option(help="Revoke this grant id.")] = None,
               include_revoked: Annotated[bool, typer.Option(help="List revoked ones too.")
                                          ] = False,
               as_json: JsonOpt = False, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """List remembered decisions (session and always grants), or revoke one."""
    if revoke:
        grant = call("DELETE", url, f"/grants/{revoke}", api_key, subject=f"grant {revoke}")
        if as_json:
            _dump(grant)
            return
        out().print(f"revoked {grant['id']} ({grant['scope']} {grant['tool']} for "
                    f"{grant['policy_id']})", markup=False)
        return
    _print_page(call("GET", url, "/grants", api_key, params={"include_revoked": include_revoked}),
                as_json, grants_table, "no grants")


def register(app: typer.Typer) -> None:
    """Add the client commands to the ``signoff`` CLI."""
    app.command("tasks")(cmd_tasks)
    app.command("show")(cmd_show)
    app.command("approve")(cmd_approve)
    app.command("deny")(cmd_deny)
    app.command("grants")(cmd_grants)
