"""Every mode a setting takes is a StrEnum: a known name becomes its member, an unknown one is
refused with "did you mean" (an unknown search mode once ran exhaustive silently)."""

import pytest

from rightsize.cluster.config import SimConfig
from rightsize.cluster.links import LinkSharing, ObservedLink
from rightsize.cluster.scheduler import SchedulingOrder
from rightsize.core.errors import RightsizeError
from rightsize.packing.choices import Backward, BatchMode, Distance, Implementation, PackStrategy
from rightsize.packing.pack import PackSettings
from rightsize.packing.packopt import PackOptSettings
from rightsize.planning.search import SearchMode, SearchSettings
from rightsize.scaling.optimus import OptimusMode, OptimusPolicy

SETTINGS = [
    (SearchSettings, "mode", "eager", SearchMode.EAGER, "eagr", "search mode 'eagr'; did you mean 'eager'"),
    (PackSettings, "batch_mode", "ragged", BatchMode.RAGGED, "raged", "batch mode"),
    (PackSettings, "optimizer_impl", "for-loop", Implementation.FOR_LOOP, "loop", "optimizer implementation"),
    (PackSettings, "backward", "autograd", Backward.AUTOGRAD, "auto", "backward"),
    (PackOptSettings, "strategy", "batch-size", PackStrategy.BATCH_SIZE, "batchsize", "pack strategy"),
    (PackOptSettings, "distance", "euclidean", Distance.EUCLIDEAN, "l2", "distance"),
    (SimConfig, "link_sharing", "cluster", LinkSharing.CLUSTER, "clusters", "link sharing"),
    (SimConfig, "observed_link", "share", ObservedLink.SHARE, "shared", "observed link"),
    (SimConfig, "order", "sjf", SchedulingOrder.SJF, "sfj", "queue order 'sfj'; did you mean 'sjf'"),
]  # fmt: skip


@pytest.mark.parametrize(("settings", "name", "known", "member", "unknown", "message"), SETTINGS)
def test_a_mode_is_its_member_and_an_unknown_one_is_refused(settings, name, known, member,
                                                            unknown, message):  # fmt: skip
    value = getattr(settings(**{name: known}), name)
    assert value is member
    with pytest.raises(RightsizeError, match=message):
        settings(**{name: unknown})


def test_optimus_takes_its_mode_by_name_and_refuses_another():
    assert OptimusPolicy(mode="sync").mode is OptimusMode.SYNC
    with pytest.raises(RightsizeError, match="optimus mode 'asynch'; did you mean 'async'"):
        OptimusPolicy(mode="asynch")


def test_a_search_takes_its_algorithm_engine_and_allocator_by_name():
    from rightsize.packing.allocator import AllocatorMode
    from rightsize.packing.choices import Algorithm
    from rightsize.packing.runner import TuneSettings, UnpackedEngine

    settings = TuneSettings(algorithm="successive-halving", unpacked_engine="pack",
                            worker_allocator="default")  # fmt: skip
    assert settings.algorithm is Algorithm.SUCCESSIVE_HALVING
    assert settings.unpacked_engine is UnpackedEngine.PACK
    assert settings.worker_allocator is AllocatorMode.DEFAULT
    for name, bad, message in (("algorithm", "hyperbnd", "did you mean 'hyperband'"),
                               ("unpacked_engine", "torch", "unpacked engine 'torch'"),
                               ("worker_allocator", "keep", "worker allocator 'keep'")):
        with pytest.raises(RightsizeError, match=message):
            TuneSettings(**{name: bad})
