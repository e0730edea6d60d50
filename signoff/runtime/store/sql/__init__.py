"""The SQLAlchemy store (SQLite and PostgreSQL): tables, row conversions, writes; the
PostgreSQL-only parts are in `store/postgres/`, the SQLite file store in `store/sqlite/`."""
