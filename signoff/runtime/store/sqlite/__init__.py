"""SQLite's hot path: named statements run with plain sqlite3."""
