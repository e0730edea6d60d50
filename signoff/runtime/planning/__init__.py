"""Planning: the Planner port, the rules planner and the OpenAI-compatible LLM."""
