"""The agent loop's own cost per turn, stored and not, and whether it stays flat over turns.

Run: ``python bench/agent.py [--tasks N] [--turns T] [--runs R]``.

The model is an in-process fake with zero latency: turn after turn it asks for one
``read_file`` of a small file, then gives a final answer. So what is measured is the
loop's own work per turn: appending the answer, the registry and the policy, running the
READ tool, appending its result — and, when stored, committing the turn.

1. stored: the real node (registry, policy, engine) on a SQLite file, the embedded
   default; each turn commits its transcript rows before the calls run.
2. baseline, in the same run: the very same loop on a store that keeps nothing (every
   commit succeeds and writes nothing), i.e. the same turn without storing.
3. flatness: tasks of 50 turns on SQLite; the bytes the store writes per turn (the JSON
   of the rows each unit of work carries) and the time per turn (median over the runs),
   turns 2-10 against turns 41-50. An append-only transcript keeps both flat; rewriting
   the conversation each turn would make them grow with the turn number.

Stored and unstored runs alternate and the best of ``--runs`` is kept, since the machine
may be busy with other work.

Prints per-turn times and, last, three lines:
``ratio stored/unstored per turn = X`` (target <= 3),
``ratio bytes per turn, turns 41-50 / turns 2-10 = Y`` (target ~1, flat) and
``ratio time per turn, turns 41-50 / turns 2-10 = Z`` (target ~1, flat).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.config.settings import Settings
from signoff.runtime.engine.agent import AgentLoop, AgentSettings
from signoff.runtime.models import TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change, TaskStore
from signoff.runtime.store.sqlite.store import SqliteTaskStore
from signoff.wiring import Node, build_node

TARGET = 3.0


class ZeroLatencyModel:
    """Asks for ``turns - 1`` reads, one per turn, then answers; records when each turn
    begins and how many bytes the store had written by then."""

    def __init__(self, turns: int, store: TaskStore | None = None) -> None:
        self.turns = turns
        self.store = store
        self.marks: list[tuple[float, int]] = []

    async def choice(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        self.marks.append((time.perf_counter(), written(self.store)))
        turn = 1 + sum(1 for m in messages if m["role"] == "assistant")
        if turn >= self.turns:
            return {"message": {"role": "assistant", "content": "done"},
                    "finish_reason": "stop"}
        call = {"id": f"call_{turn}", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
        return {"message": {"role": "assistant", "content": f"reading, turn {turn}",
                            "tool_calls": [call]}, "finish_reason": "tool_calls"}


class NothingStore(MemTaskStore):
    """Every commit succeeds and keeps nothing: the loop's work without any storing."""

    async def commit(self, change: Change) -> bool:
        if change.task is not None and not change.insert:
            change.task.version += 1
        return True


class CountingStore(SqliteTaskStore):
    """The SQLite store, counting the JSON bytes of the rows each unit of work writes."""

    bytes_written = 0

    async def commit(self, change: Change) -> bool:
        self.bytes_written += len(change.task.model_dump_json()) if change.task else 0
        self.bytes_written += sum(len(e.model_dump_json()) for e in change.transcript)
        self.bytes_written += sum(len(e.model_dump_json()) for e in change.audit)
        return await super().commit(change)


def written(store: TaskStore | None) -> int:
    """JSON bytes the store has been given to write so far."""
    return store.bytes_written if isinstance(store, CountingStore) else 0


def node(work: Path, store: TaskStore, model: ZeroLatencyModel, turns: int) -> Node:
    (work / "work").mkdir(parents=True, exist_ok=True)
    (work / "work" / "notes.txt").write_text("Meeting moved to 3pm\n" * 3)
    settings = Settings.model_validate({"daemon": {"work_dir": str(work / "work"),
                                                   "node_id": "bench"}})
    built = build_node(settings, store=store, surfaces={})
    built.engine.runner = AgentLoop(model=model, settings=AgentSettings(
        model="zero", max_turns=turns + 1, max_actions=turns + 1))
    return built


async def run_tasks(store: TaskStore, work: Path, tasks: int, turns: int) -> float:
    """Seconds per turn over ``tasks`` agent tasks of ``turns`` turns each."""
    model = ZeroLatencyModel(turns)
    n = node(work, store, model, turns)
    await store.open()
    try:
        began = time.perf_counter()
        for _ in range(tasks):
            task = await n.engine.submit("read the notes again and again", claim=True)
            assert task is not None
            done = await n.engine.advance(task)
            assert done.state is TaskState.COMPLETED, done.result
        return (time.perf_counter() - began) / (tasks * turns)
    finally:
        await store.close()


async def long_task(work: Path, turns: int) -> tuple[list[float], list[int]]:
    """(seconds, bytes written) of each turn of one long task on SQLite."""
    store = CountingStore(url=f"sqlite:///{work / 'flat.db'}")
    model = ZeroLatencyModel(turns, store)
    n = node(work, store, model, turns)
    await store.open()
    try:
        task = await n.engine.submit("read the notes again and again", claim=True)
        assert task is not None
        done = await n.engine.advance(task)
        assert done.state is TaskState.COMPLETED, done.result
    finally:
        await store.close()
    marks = model.marks  # turn k runs from mark k-1 to mark k (the answer is stored first)
    return ([b[0] - a[0] for a, b in itertools.pairwise(marks)],
            [b[1] - a[1] for a, b in itertools.pairwise(marks)])


async def flatness(work: Path, turns: int, runs: int) -> tuple[float, float, list[float],
                                                                list[int]]:
    """(bytes ratio, time ratio, per-turn times, per-turn bytes) of long tasks: each turn's
    time is its median over ``runs`` tasks, and turns 2-10 are compared with turns 41-50
    (turn 1 also inserts the task, so it is left out)."""
    results = [await long_task(work / f"run{r}", turns) for r in range(runs)]
    times = [statistics.median(r[0][i] for r in results) for i in range(turns - 1)]
    sizes = results[0][1]
    early, late = slice(1, 10), slice(-10, None)
    byte_ratio = statistics.mean(sizes[late]) / statistics.mean(sizes[early])
    time_ratio = statistics.median(times[late]) / statistics.median(times[early])
    return byte_ratio, time_ratio, times, sizes


async def main(tasks: int, turns: int, runs: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        await run_tasks(NothingStore(), root / "warm", 2, 3)  # imports, caches
        unstored, stored = [], []
        for r in range(runs):  # alternated, best of each: the machine may be busy
            unstored.append(await run_tasks(NothingStore(), root / f"nothing{r}", tasks, turns))
            stored.append(await run_tasks(SqliteTaskStore(url=f"sqlite:///{root / f'a{r}.db'}"),
                                          root / f"sqlite{r}", tasks, turns))
        byte_ratio, time_ratio, times, sizes = await flatness(root / "flat", 50, runs)
    ratio = min(stored) / min(unstored)
    print(f"agent turns: {tasks} tasks x {turns} turns, zero-latency model, one read_file "
          f"per turn, best of {runs}")
    print(f"  without storing:  {min(unstored) * 1e6:8.1f} µs per turn")
    print(f"  SQLite (stored):  {min(stored) * 1e6:8.1f} µs per turn")
    print(f"one task of 50 turns on SQLite (median of {runs} runs per turn):")
    print(f"  bytes written per turn: turns 2-5 {sizes[1:5]}, turns 46-50 {sizes[-5:]}")
    print(f"  µs per turn: turns 2-5 {[round(t * 1e6) for t in times[1:5]]}, "
          f"turns 46-50 {[round(t * 1e6) for t in times[-5:]]}")
    print(f"ratio stored/unstored per turn = {ratio:.2f} (target <= {TARGET:g})")
    print(f"ratio bytes per turn, turns 41-50 / turns 2-10 = {byte_ratio:.2f} (flat ~1)")
    print(f"ratio time per turn, turns 41-50 / turns 2-10 = {time_ratio:.2f} (flat ~1)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.tasks, args.turns, args.runs)))
