"""Writes the torchrun environment each rank sees (RANK, WORLD_SIZE, MASTER_*, TORCHELASTIC_*
...) to OUT.RANK.json, after meeting the group: run it under torchrun and under rightsize
torchrun and compare."""

import json
import os
import sys

import torch.distributed as dist

PREFIXES = ("TORCH", "RANK", "LOCAL_", "WORLD", "GROUP_", "ROLE_", "MASTER_", "OMP_")

dist.init_process_group("gloo")
dist.barrier()
with open(f"{sys.argv[1]}.{dist.get_rank()}.json", "w") as out:
    json.dump({k: v for k, v in os.environ.items() if k.startswith(PREFIXES)}, out)
dist.destroy_process_group()
