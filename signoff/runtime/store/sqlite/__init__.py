"""The SQL store on a SQLite file: one owning thread (`thread`), named hot queries
(`queries`), and `SqliteTaskStore` (`store`), a thin specialisation of the SQL store."""
