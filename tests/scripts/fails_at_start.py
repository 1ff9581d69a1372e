"""A script with a mistake its user makes: it imports a module that is not installed."""

import a_module_that_is_not_installed  # noqa: F401
import torch.distributed as dist

dist.init_process_group("gloo")
