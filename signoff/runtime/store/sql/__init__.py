"""The SQLAlchemy store (SQLite and PostgreSQL): tables, row conversions, writes."""
