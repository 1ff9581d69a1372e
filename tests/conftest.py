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


@pytest.fixture(autouse=True, scope="session")
def private_store(tmp_path_factory):
    """Runs and studies are written to a store (service/db.py): the tests' own, never the
    user's, and never as the token of a user who followed the quick-start's export."""
    import os

    os.environ["RIGHTSIZE_DATABASE"] = str(tmp_path_factory.mktemp("store") / "runs.db")
    for variable in ("RIGHTSIZE_TOKEN", "RIGHTSIZE_SERVER"):
        os.environ.pop(variable, None)
    yield


def pytest_addoption(parser):
    parser.addoption(
        "--chaos-schedules", type=int, default=0, metavar="N",
        help="run N seeded chaos schedules (tests marked chaos; seeds from --chaos-first-seed)",
    )  # fmt: skip
    parser.addoption("--chaos-first-seed", type=int, default=0, metavar="SEED")
    parser.addoption(
        "--slow", action="store_true",
        help="also run the tests marked slow (real jobs of a minute or more)",
    )  # fmt: skip


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="a real job of a minute or more: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_generate_tests(metafunc):
    if "chaos_seed" in metafunc.fixturenames:
        first = metafunc.config.getoption("--chaos-first-seed")
        count = metafunc.config.getoption("--chaos-schedules")
        metafunc.parametrize("chaos_seed", range(first, first + count))
