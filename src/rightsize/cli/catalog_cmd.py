"""``rightsize catalog``: list cloud instance types (or accelerators), filtered."""

from __future__ import annotations

import argparse

from rightsize.cli.args import forbid_together, require_together
from rightsize.cli.output import format_table, print_json
from rightsize.core.catalog import Catalog, builtin_catalogs, load_catalog, load_catalogs


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List instance types with their accelerators, vCPUs, memory, rated network "
        "bandwidth and hourly prices. Built-in catalogs: " + ", ".join(builtin_catalogs()) + "."
    )
    parser.add_argument(
        "--cloud",
        action="append",
        metavar="NAME",
        help="built-in catalog to list (repeatable; default aws, gcp, azure)",
    )
    parser.add_argument("--file", metavar="CSV", help="your own catalog CSV (same columns)")
    parser.add_argument(
        "--accelerators-file", metavar="CSV", help="extra accelerators table for --file"
    )
    parser.add_argument(
        "--gpu", metavar="NAME", help="only instances with this accelerator, e.g. T4"
    )
    parser.add_argument("--region", help="only this region")
    parser.add_argument("--gpus-only", action="store_true", help="only instances with accelerators")
    parser.add_argument(
        "--accelerators",
        action="store_true",
        help="list the accelerators table instead of instances",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=run)  # fmt: skip


def _load(args: argparse.Namespace) -> Catalog:
    forbid_together(args, "file", ["cloud"], "--file lists your own catalog instead")
    require_together(args, "accelerators_file", "file", "it extends your own catalog")
    if args.file:
        return load_catalog(args.file, accelerators=args.accelerators_file)
    return load_catalogs(args.cloud or ["aws", "gcp", "azure"])


def run(args: argparse.Namespace) -> int:
    catalog = _load(args)
    if args.accelerators:
        return _print_accelerators(catalog, args.json)
    catalog = catalog.filter(gpu=args.gpu, region=args.region, gpus_only=args.gpus_only)
    rows = [
        {
            "cloud": i.cloud,
            "instance_type": i.name,
            "accelerator": i.accelerator_name,
            "accelerator_count": i.accelerator_count,
            "vcpus": i.vcpus,
            "memory_gib": i.memory_gib,
            "network_gbps": i.network_gbps,
            "price_usd_per_hour": i.price_usd_per_hour,
            "spot_price_usd_per_hour": i.spot_price_usd_per_hour,
            "region": i.region,
        }
        for i in catalog
    ]
    if args.json:
        print_json(rows)
        return 0
    print(format_table(
        ["cloud", "instance type", "accelerators", "vCPUs", "memory GiB", "net Gbps", "$/h", "spot $/h", "region"],
        [[i.cloud, i.name, i.describe_accelerators(), i.vcpus, f"{i.memory_gib:g}", f"{i.network_gbps:g}",
          f"{i.price_usd_per_hour:.4g}",
          "-" if i.spot_price_usd_per_hour is None else f"{i.spot_price_usd_per_hour:.4g}", i.region]
         for i in catalog],
    ))  # fmt: skip
    print(f"\n{len(catalog)} instance types")
    return 0


def _print_accelerators(catalog: Catalog, as_json: bool) -> int:
    accs = sorted(catalog.accelerators, key=lambda a: a.name)
    if as_json:
        print_json([a.__dict__ for a in accs])
        return 0
    print(format_table(
        ["accelerator", "memory GiB", "fp32 TFLOPS", "tf32 TFLOPS", "fp16 TFLOPS", "mem GB/s"],
        [[a.name, f"{a.memory_gib:g}", f"{a.fp32_tflops:g}",
          "-" if a.tf32_tflops is None else f"{a.tf32_tflops:g}", f"{a.fp16_tflops:g}",
          f"{a.mem_bandwidth_gbs:g}"] for a in accs],
    ))  # fmt: skip
    return 0
