"""An agent task in a real `signoff daemon start`, killed with SIGKILL and restarted: the
stored transcript carries the conversation, so the model is never asked again for a turn
it already answered, and a gated call cut short comes back to a person."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_daemon_crash import Daemon, processes, wait_for
from tests.fakes.openai import Answer, FakeOpenAI, Seen, steps
from tests.fakes.smtp import FakeSmtpServer

NOTES = "Meeting moved to 3pm\nsecond line\n"
# A command line of this test process alone (not listed as read-only: DESTRUCTIVE), so
# cleaning up never kills the children of another test run on the same machine.
GATED_SLEEP = f"sleep {50_000 + os.getpid()}"


def kill_children() -> None:
    for pid in processes(GATED_SLEEP):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def mail_first_line(seen: Seen) -> Answer:
    """Read the notes, mail Bob their first line, then report."""
    if seen.turn == 1:
        return Answer(content="Reading the notes.", calls=[("read_file", {"path": "notes.txt"})])
    if seen.turn == 2:
        first = seen.result()["content"].splitlines()[0]
        return Answer(content="Mailing Bob the first line.", calls=[("send_email", {
            "to": "bob@example.com", "subject": "notes", "body": first})])
    return Answer(content="Bob has the first line.")


class AgentDaemon(Daemon):
    """The crash test's daemon, with its planner pointed at a fake model."""

    def configure(self, base_url: str, extra: str = "") -> None:
        self.config.write_text(self.config.read_text() + (
            f'[planner]\nkind = "openai"\nbase_url = "{base_url}"\nmodel = "llama3.1"\n'
            f'timeout = "10s"\n{extra}'))

    def submit_goal(self, goal: str) -> str:
        r = httpx.post(f"{self.url}/tasks", json={"goal": goal})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def transcript(self, task_id: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/tasks/{task_id}/transcript", params={"limit": 500})
        return list(r.json()["items"])


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[AgentDaemon]:
    """A daemon with notes in its work dir, stopped (and its tools' children killed) after."""
    d = AgentDaemon(tmp_path)
    (d.work / "notes.txt").write_text(NOTES)
    yield d
    d.stop()
    kill_children()


def test_kill_while_waiting_then_approve_asks_the_model_nothing_twice(
        daemon: AgentDaemon) -> None:
    """kill -9 while the agent's e-mail waits for approval; after the restart the approval
    sends exactly what was read, and the model got one request per turn, no more."""
    with FakeSmtpServer() as smtp, FakeOpenAI(script=mail_first_line) as llm:
        daemon.configure(llm.base_url, f'[email]\nhost = "{smtp.host}"\nport = {smtp.port}\n')
        daemon.start()
        task_id = daemon.submit_goal("email bob the first line of notes.txt")
        wait_for(lambda: daemon.task(task_id)["state"] == "waiting_approval", "the e-mail card")
        assert len(llm.requests) == 2

        daemon.kill()
        daemon.start()
        waiting = daemon.task(task_id)
        assert waiting["state"] == "waiting_approval"
        assert waiting["pending_action"]["args"]["body"] == "Meeting moved to 3pm"
        assert len(llm.requests) == 2

        assert daemon.approve(task_id).status_code == 200
        wait_for(lambda: daemon.task(task_id)["state"] == "completed", "the task to complete")
        done = daemon.task(task_id)
        assert done["result"]["answer"] == "Bob has the first line."
        assert [m.body.strip() for m in smtp.messages] == ["Meeting moved to 3pm"]
        assert len(llm.requests) == 3
        roles = [m["role"] for m in daemon.transcript(task_id)]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_a_gated_call_cut_short_by_a_crash_comes_back_to_a_person(
        daemon: AgentDaemon) -> None:
    """kill -9 while an approved command runs: after the restart the same call asks again
    ("outcome unknown after a crash", with the model's words), nothing re-runs, and a deny
    is told to the model, which finishes."""
    script = steps(Answer(content="Running the long job.",
                          calls=[("run_command", {"command": GATED_SLEEP})]),
                   Answer(content="The job was not approved."))
    with FakeOpenAI(script=script) as llm:
        daemon.configure(llm.base_url)
        daemon.start()
        task_id = daemon.submit_goal("run the long job")
        wait_for(lambda: daemon.task(task_id)["state"] == "waiting_approval", "the request")
        assert daemon.approve(task_id).status_code == 200
        wait_for(lambda: bool(processes(GATED_SLEEP)), "the command to run")

        daemon.kill()
        kill_children()
        daemon.start()
        wait_for(lambda: daemon.task(task_id)["state"] == "waiting_approval", "a new request")
        assert not processes(GATED_SLEEP)
        pending = httpx.get(f"{daemon.url}/approvals").json()["items"]
        assert [(p["note"], p["why"]) for p in pending] == [
            ("outcome unknown after a crash", "Running the long job.")]
        assert len(llm.requests) == 1

        r = httpx.post(f"{daemon.url}/tasks/{task_id}/deny", json={"reason": "not now"})
        assert r.status_code == 200
        wait_for(lambda: daemon.task(task_id)["state"] == "completed", "the model to finish")
        assert len(llm.requests) == 2
        told = [json.loads(m["content"]) for m in llm.requests[1]["messages"]
                if m["role"] == "tool"]
        assert told == [{"error": "not approved: user denied: not now"}]
