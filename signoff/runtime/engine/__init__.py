"""The engine room: `engine.py` runs a task (plan once, safe steps, pause, resume) and
offers its public moves; `agent.py` is the agent loop, the other runner, built on them.

``from signoff.runtime.engine import Engine, EngineConfig`` (the agent loop is imported
from `signoff.runtime.engine.agent` by whoever wires it).
"""

from signoff.runtime.engine.engine import Engine, EngineConfig

__all__ = ["Engine", "EngineConfig"]
