"""The task store: the port, the in-memory store and the SQL stores."""
