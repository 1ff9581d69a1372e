from pathlib import Path

import pytest

from rightsize.core.catalog import INSTANCE_COLUMNS, builtin_catalogs, load_catalog, load_catalogs
from rightsize.core.errors import SpecError, UnknownNameError

HEADER = ",".join(INSTANCE_COLUMNS)


def csv(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_builtin_catalogs_load_and_cover_the_papers_instances():
    assert set(builtin_catalogs()) >= {"aws", "gcp", "azure", "fc2-2018", "srift-2020"}
    aws = load_catalog("aws")
    wanted = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge",
              "g3.4xlarge", "g3.8xlarge", "g4dn.xlarge", "g4dn.8xlarge", "g4dn.16xlarge", "g5.xlarge",
              "g5.48xlarge", "g6.xlarge", "c5.4xlarge", "c5.18xlarge", "c6i.large", "m4.large", "m5.large",
              "t2.xlarge"]  # fmt: skip
    for name in wanted:
        aws.get(name)
    assert aws.get("g4dn.8xlarge").accelerator.name == "T4"
    assert aws.get("p3.8xlarge").accelerator_count == 4
    assert aws.get("m4.2xlarge", region="ap-southeast-1").region == "ap-southeast-1"
    for cloud in ("gcp", "azure"):
        assert len(load_catalog(cloud).filter(gpus_only=True)) >= 10


def test_fc2_table_prices_replay_exactly():
    # FC2 Tables 1-2 (Singapore, August 2018)
    fc2 = load_catalog("fc2-2018")
    prices = {i.name: i.price_usd_per_hour for i in fc2}
    assert (
        prices["m4.large"] == 0.125
        and prices["t2.xlarge"] == 0.2336
        and prices["p2.xlarge"] == 1.718
    )
    assert len(fc2) == 9


def test_srift_spot_prices_from_table_4():
    srift = load_catalog("srift-2020")
    assert srift.get("p3.8xlarge").price(spot=True) == 3.68
    assert srift.get("g3.8xlarge").price(spot=True) == 0.69
    assert srift.get("g4dn.8xlarge").price(spot=True) == 0.72


def test_filters_and_lookups():
    catalog = load_catalogs(["aws", "gcp"])
    t4 = catalog.filter(gpu="t4")
    assert len(t4) > 5 and all(i.accelerator_name == "T4" for i in t4)
    assert {i.cloud for i in t4} == {"aws", "gcp"}
    assert all(i.region == "us-east-1" for i in catalog.filter(region="us-east-1"))
    with pytest.raises(UnknownNameError, match="did you mean 'g4dn.8xlarge'"):
        catalog.get("g4dn.8xlarg")
    with pytest.raises(UnknownNameError, match="accelerator"):
        catalog.filter(gpu="T5000")
    with pytest.raises(UnknownNameError, match="cloud catalog"):
        load_catalog("awss")


def test_a_users_csv_loads_and_is_validated_row_by_row(tmp_path):
    good = csv(tmp_path, "box.gpu,T4,2,16,64,25,1.50,0.45,home", "box.cpu,,0,8,32,10,0.40,,home")
    catalog = load_catalog(good)
    assert (
        catalog.get("box.gpu").accelerator_count == 2 and catalog.get("box.cpu").accelerator is None
    )
    assert catalog.get("box.cpu").spot_price_usd_per_hour is None
    with pytest.raises(SpecError, match="no spot price"):
        catalog.get("box.cpu").price(spot=True)


@pytest.mark.parametrize(
    ("rows", "header", "message"),
    [
        (
            ["x,T4,1,8,32,10,1.0,,r"],
            HEADER.replace(",NetworkGbps", ""),
            "missing column(s) NetworkGbps",
        ),
        (["x,T4,1,8,32,10,abc,,r"], HEADER, "line 2: column Price = 'abc' is not a number"),
        (
            ["x,T4,1,8,32,10,1.0,,r", "y,T4,one,8,32,10,1.0,,r"],
            HEADER,
            "line 3: column AcceleratorCount",
        ),
        (["x,Z9,1,8,32,10,1.0,,r"], HEADER, "accelerator 'Z9' is not in the accelerators table"),
        (["x,T4,1,8,32,10,1.0,,r", "x,T4,1,8,32,10,1.0,,r"], HEADER, "duplicate row for x in r"),
        (["x,T4,1,8,32,10,0,,r"], HEADER, "Price must be > 0"),
        (["x,T4,1,8,32,-3,1.0,,r"], HEADER, "NetworkGbps = '-3' must be finite and >= 0"),
        ([], HEADER, "no instance rows"),
    ],
)
def test_bad_catalog_rows(tmp_path, rows, header, message):
    with pytest.raises(SpecError) as info:
        load_catalog(csv(tmp_path, *rows, header=header))
    assert message in str(info.value)


def test_unreadable_catalog(tmp_path):
    with pytest.raises(SpecError, match="cannot read catalog"):
        load_catalog(tmp_path / "absent.csv")


def test_keplers_single_issue_fraction_is_read_and_checked(tmp_path):
    """A K80's SMX has 192 FP32 cores and 4 schedulers of 32 lanes: single issue keeps 2/3 busy,
    and that is the rate the device models time its arithmetic at (AMP included: it has no
    faster fp16 path); an issue fraction outside (0, 1] names the file, line and column."""
    from rightsize.core.catalog import find_accelerator
    from rightsize.perf.precision import OpClass, Precision, peak_flops_per_s, runs_on_tensor_cores

    k80, v100 = find_accelerator("K80"), find_accelerator("V100")
    assert k80.issue_fraction == pytest.approx(2 / 3, abs=1e-3) and v100.issue_fraction is None
    assert k80.cuda_core_flops_per_s == pytest.approx(2.80e12 * 2 / 3, rel=1e-3)
    assert v100.cuda_core_flops_per_s == v100.fp32_tflops * 1e12
    for precision in (Precision.FP32, Precision.AMP):
        assert peak_flops_per_s(k80, precision, OpClass.CONV) == k80.cuda_core_flops_per_s
        assert not runs_on_tensor_cores(k80, precision, OpClass.CONV)
    assert runs_on_tensor_cores(v100, Precision.AMP, OpClass.CONV)
    header = "name,memory_gib,fp32_tflops,fp16_tflops,mem_bandwidth_gbs,tf32_tflops,sm_count,issue_fraction"
    accs = tmp_path / "accs.csv"
    accs.write_text(f"{header}\nOld,12,3.0,3.0,240,,13,0.5\n")
    instances = csv(tmp_path, "box,Old,1,8,32,10,1.0,,home")
    assert load_catalog(instances, accelerators=accs).get("box").accelerator.issue_fraction == 0.5
    accs.write_text(f"{header}\nOld,12,3.0,3.0,240,,13,1.5\n")
    with pytest.raises(SpecError, match=r"accs.csv line 2: column issue_fraction = 1.5 must be in \(0, 1\]"):
        load_catalog(instances, accelerators=accs)
