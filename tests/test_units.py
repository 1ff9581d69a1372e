import pytest

from rightsize.core.errors import RightsizeError, UnitError
from rightsize.core.units import (
    format_bytes,
    format_duration,
    format_money,
    parse_cpu,
    parse_duration,
    parse_memory,
    parse_money,
)


@pytest.mark.parametrize(
    ("raw", "cores"),
    [("500m", 0.5), ("2.5", 2.5), (2, 2.0), ("2", 2.0), ("1500m", 1.5), (" 4 ", 4.0), ("0", 0.0)],
)
def test_parse_cpu(raw, cores):
    assert parse_cpu(raw) == cores


@pytest.mark.parametrize(
    ("raw", "size"),
    [
        ("512Mi", 512 * 2**20),
        ("4Gi", 4 * 2**30),
        ("4GiB", 4 * 2**30),
        ("4GB", 4_000_000_000),
        ("4G", 4_000_000_000),
        ("1.5Gi", int(1.5 * 2**30)),
        ("100", 100),
        (1024, 1024),
        ("64Ki", 65536),
        ("2Ti", 2 * 2**40),
    ],
)
def test_parse_memory(raw, size):
    assert parse_memory(raw) == size


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("90s", 90), ("2h", 7200), ("1h30m", 5400), ("1h 30m", 5400), ("45m", 2700), ("1d", 86400),
     ("1.5h", 5400), (30, 30), ("250ms", 0.25), ("1m30s", 90), ("600", 600)],
)  # fmt: skip
def test_parse_duration(raw, seconds):
    assert parse_duration(raw) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("raw", "dollars"), [("$3.50", 3.5), ("3.5", 3.5), ("$1,200", 1200), ("30 USD", 30), (7, 7)]
)
def test_parse_money(raw, dollars):
    assert parse_money(raw) == dollars


@pytest.mark.parametrize(
    ("parser", "raw"),
    [
        (parse_cpu, "two"),
        (parse_cpu, "-1"),
        (parse_cpu, "5 cores"),
        (parse_memory, "4XB"),
        (parse_memory, "lots"),
        (parse_memory, "-4Gi"),
        (parse_duration, "2 hours"),
        (parse_duration, "h"),
        (parse_money, "€3"),
        (parse_money, "-5"),
        (parse_cpu, True),
        (parse_memory, None),
    ],
)
def test_bad_quantities_raise_unit_error_naming_the_field(parser, raw):
    with pytest.raises(UnitError) as info:
        parser(raw, field="budget.x")
    assert isinstance(info.value, RightsizeError) and isinstance(info.value, ValueError)
    assert "budget.x" in str(info.value) or "expected" in str(info.value)


def test_memory_error_shows_an_example():
    with pytest.raises(UnitError, match="512Mi"):
        parse_memory("4XB")


def test_formatting():
    assert format_bytes(1536 * 2**20) == "1.5Gi"
    assert format_bytes(1000 * 2**20) == "1000Mi"
    assert format_bytes(12) == "12B"
    assert format_duration(0.0031) == "3.1ms"
    assert format_duration(42.0) == "42s"
    assert format_duration(5400) == "1h30m"
    assert format_duration(125) == "2m05s"
    assert format_money(3.5) == "$3.50"
    assert format_money(0.00321) == "$0.00321"
