"""``rightsize workloads``: list the model zoo and the datasets."""

from __future__ import annotations

import argparse

from rightsize.cli.output import format_table, print_json


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the zoo models (with the data they take and their options) and the "
        "datasets. A workload is a zoo name or your own package.module:function returning a "
        "rightsize.workloads.Workload."
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # the zoo is PyTorch code: importing it is most of this command's time, not its --help's
    from rightsize.workloads.registry import WorkloadRegistry

    listing = WorkloadRegistry().listing()
    models, datasets = listing["models"], listing["datasets"]
    if args.json:
        print_json(listing)
        return 0
    print(format_table(
        ["workload", "data", "default dataset", "options", "description"],
        [[m["name"], "/".join(m["data"]), m["default_dataset"], ",".join(m["options"]), m["description"]]
         for m in models],
    ))  # fmt: skip
    print()
    print(format_table(
        ["dataset", "kind", "samples", "description"],
        [[d["name"], d["kind"], d["samples"], d["description"]] for d in datasets],
    ))  # fmt: skip
    return 0
