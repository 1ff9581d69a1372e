"""What the commands that write the store share: where it is, and what this host is."""

from __future__ import annotations

import argparse
import os

from rightsize.core.catalog import builtin_catalogs, load_catalogs

#: This host's cloud instance type, when neither --instance-type nor the job says it.
ENV_INSTANCE_TYPE = "RIGHTSIZE_INSTANCE_TYPE"


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database", help="store URL or SQLite file (default $RIGHTSIZE_DATABASE or "
        "~/.local/share/rightsize/rightsize.db)"
    )  # fmt: skip


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_argument(parser)
    parser.add_argument(
        "--instance-type", metavar="TYPE", help=f"this host's cloud instance type (default "
        f"${ENV_INSTANCE_TYPE}): runs stored with it feed `plan`'s predictions for that type"
    )  # fmt: skip


def instance_type_of(args: argparse.Namespace) -> str | None:
    """The declared instance type, checked against the built-in catalogs.

    Raises:
        UnknownNameError: no catalog has it (with the closest name).
    """
    name = args.instance_type or os.environ.get(ENV_INSTANCE_TYPE) or None
    if name is not None:
        load_catalogs(builtin_catalogs()).get(name)
    return name


def open_store(args: argparse.Namespace, database: str | None = None):
    """The store the command writes (a bad URL or instance type fails here, before any work)."""
    from rightsize.service.store import Store  # SQLAlchemy: only for commands that store

    return Store(database or args.database, instance_type=instance_type_of(args))
