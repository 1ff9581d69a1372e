import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # test helpers such as profile_factory


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module's tests, restored afterwards.

    On this shared 2-vCPU machine a second thread waits at every barrier for a stolen vCPU
    and a test can take 10x longer (docs/profiling.md); bit-for-bit comparisons also need
    the packed and the alone runs to sum products in one order.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
