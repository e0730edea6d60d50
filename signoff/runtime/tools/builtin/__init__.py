"""The built-in tools: files, commands, messages and HTTP."""
