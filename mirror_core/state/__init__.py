"""The state store: what workflows decided and did (SQLAlchemy 2.x; SQLite by default, PostgreSQL in production)."""
