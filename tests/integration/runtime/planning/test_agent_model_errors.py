"""An agent whose model server refuses the request: the task fails with the server's own
words (vLLM without tool support, Ollama without the model), not `failed: 'choices'`."""

from __future__ import annotations

from pathlib import Path

import pytest

from signoff.runtime.models import TaskState
from tests.agentkit import agent_node, start
from tests.conftest import NodeFactory
from tests.fakes.openai import (
    ERROR_WITH_200,
    OLLAMA_NO_MODEL,
    VLLM_NO_TOOL_CHOICE,
    Failure,
    FakeOpenAI,
)


@pytest.mark.parametrize(("failure", "said"), [
    (VLLM_NO_TOOL_CHOICE, "requires --enable-auto-tool-choice and --tool-call-parser"),
    (OLLAMA_NO_MODEL, "not found, try pulling it first"),
    (ERROR_WITH_200, "upstream model overloaded")])
async def test_the_servers_words_are_the_reason(node_factory: NodeFactory, tmp_path: Path,
                                                failure: Failure, said: str) -> None:
    """result.reason carries what the model server said."""
    async with FakeOpenAI(failure) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        task = await start(node, "summarize notes.txt")
    assert task.state is TaskState.FAILED and task.result is not None
    assert said in task.result["reason"], task.result["reason"]
