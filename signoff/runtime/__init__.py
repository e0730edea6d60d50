"""signoff runtime: the engine, free of chat and HTTP."""
