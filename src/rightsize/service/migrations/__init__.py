"""Alembic migrations of the store (run by :func:`rightsize.service.db.open_engine`)."""
