"""The elastic training runtime: job master, data shards, parameter servers, workers, backends.

This is the mechanism of ``rightsize run`` (DLRover's Elastic Trainer, §5): it
launches nodes, shards the data dynamically, collects metrics, hands
observations to a :class:`rightsize.scaling.api.Policy` and applies the plans it
returns. It decides nothing itself. See ``docs/runtime.md``.
"""
