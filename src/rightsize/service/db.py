"""Where the store lives, and opening it: SQLite in a file by default, PostgreSQL by URL.

Every command that writes runs (``rightsize run``, ``rightsize serve``) opens the same
store: ``--database`` or ``$RIGHTSIZE_DATABASE`` (a URL, or a path for SQLite), else
``$XDG_DATA_HOME/rightsize/rightsize.db`` (``~/.local/share/...``), so history builds
up with no set-up. Opening migrates the schema to the newest revision (Alembic, in one
transaction), so a store written by an older rightsize is upgraded in place.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from rightsize.core.errors import SpecError

ENV_DATABASE = "RIGHTSIZE_DATABASE"
#: SQLite waits this long for another process's write (the service and a ``run`` at once).
SQLITE_BUSY_MS = 30_000


def default_url() -> str:
    """``$RIGHTSIZE_DATABASE``, else the per-user SQLite file."""
    configured = os.environ.get(ENV_DATABASE)
    if configured:
        return as_url(configured)
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return as_url(str(base / "rightsize" / "rightsize.db"))


def as_url(database: str) -> str:
    """A database URL from a URL or a file path; ``postgresql://`` uses psycopg 3."""
    if "://" not in database:
        return f"sqlite:///{Path(database).expanduser().resolve()}"
    if database.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + database.split("://", 1)[1]
    return database


def open_engine(database: str | None = None) -> Engine:
    """Connect to ``database`` (default :func:`default_url`) and migrate it to the newest schema.

    Raises:
        SpecError: the URL is malformed, its driver is missing, or the database cannot be
            reached — one line naming the URL (its password hidden).
    """
    url = as_url(database) if database else default_url()
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SpecError(f"--database: {url!r} is not a database URL or a file path") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = create_engine(parsed, pool_pre_ping=True)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise SpecError(f"--database: no driver for {shown} ({exc}); PostgreSQL needs "
                        "pip install 'psycopg[binary]'") from None  # fmt: skip
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        migrate(engine)
    except OperationalError as exc:
        engine.dispose()
        raise SpecError(f"--database: cannot open {shown}: {exc.orig}") from None
    return engine


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")  # cascades: a job's rows go with it
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    cursor.close()


def migrate(engine: Engine) -> None:
    """Bring the schema to Alembic's head revision (a no-op when it is there)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
