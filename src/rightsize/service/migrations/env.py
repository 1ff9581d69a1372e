"""Alembic's entry point: migrate the connection the store hands over (never a URL of its own)."""

from alembic import context

from rightsize.service.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata,
                  render_as_batch=connection.dialect.name == "sqlite")  # fmt: skip
with context.begin_transaction():
    context.run_migrations()
