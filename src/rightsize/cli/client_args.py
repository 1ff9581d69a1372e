"""What the service's client commands share: where the server is, the token, --json."""

from __future__ import annotations

import argparse

from rightsize.service.client import ENV_SERVER, ENV_TOKEN, Client


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", help=f"the service's URL (default ${ENV_SERVER}, the config "
                        "file, or http://127.0.0.1:8765)")  # fmt: skip
    parser.add_argument("--token", help=f"your API token (default ${ENV_TOKEN} or the config file)")
    parser.add_argument("--json", action="store_true", help="print the server's answer as JSON")


def client_of(args: argparse.Namespace) -> Client:
    return Client.configured(args.server, args.token)
