"""The PostgreSQL-only parts of the store: `PgTaskStore` (the SQL store's hot path on
psycopg), LISTEN/NOTIFY wake-ups, leader leases, the shared replay ledger, group commit."""
