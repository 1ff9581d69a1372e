"""What every benchmark script shares, and nothing specific to one area.

- ``envelope``: the JSON envelope every result file has (the command that reran it, when,
  on what machine, at which commit) and the atomic write of that file;
- ``repeats``: interleaved repeats in a seeded shuffle, the warm-up cut and medians;
- ``errors``: the error measures results quote (the one MAPE);
- ``load``: the host's load when a benchmark ran (this machine is shared);
- ``timing``: timing calls round-robin and taking their medians;
- ``job``: a tiny PS job run to completion inside the benchmark's own process.

``lib`` imports no area folder. A script finds this package through the one idiom every
script under ``benchmarks/`` starts with, before its other imports::

    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
"""
