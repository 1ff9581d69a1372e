"""`plan --script`: a user's script planned from its stored runs on the types they measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rightsize.core.catalog import builtin_catalogs, load_catalogs
from rightsize.core.errors import SpecError
from rightsize.core.spec import Constraints, Objective
from rightsize.planning.measured import MeasuredSpeed
from rightsize.planning.measured_script import measured_plans

SCRIPTS = Path(__file__).resolve().parent / "scripts"
CATALOG = load_catalogs(builtin_catalogs())


def test_one_vm_of_each_measured_type_at_its_measured_speed():
    speeds = [MeasuredSpeed("run-1", "c5.large", 1, 100.0, 1.0),  # held 1 of the 2 vCPUs
              MeasuredSpeed("run-2", "c5.large", 1, 150.0, 2.0),
              MeasuredSpeed("run-3", "c5.xlarge", 1, 300.0, 4.0)]  # fmt: skip
    plans = measured_plans(speeds, CATALOG.get, 360_000, Constraints(), Objective.TIME)
    xlarge, large = plans
    # c5.large: run-1 scaled to the whole VM (100 x 2/1 = 200) beats run-2's 150
    assert (large.instance_type, large.samples_per_s, large.scaled_from_cores) == ("c5.large",
                                                                                    200.0, 1.0)
    assert large.time_s == pytest.approx(1800.0)
    assert large.cost_usd == pytest.approx(0.5 * CATALOG.get("c5.large").price())
    assert xlarge.time_s == pytest.approx(1200.0) and xlarge.measured_by == ("run-3",)
    cheapest = measured_plans(speeds, CATALOG.get, 360_000, Constraints(), Objective.COST)
    assert cheapest[0].cost_usd <= cheapest[1].cost_usd
    within = measured_plans(speeds, CATALOG.get, 360_000, Constraints(deadline_s=1500),
                            Objective.COST)  # fmt: skip
    assert [p.instance_type for p in within] == ["c5.xlarge"]
    with pytest.raises(SpecError, match="instance-type"):
        measured_plans([], CATALOG.get, 1, Constraints(), Objective.TIME)


@pytest.mark.integration
def test_a_script_run_with_its_instance_type_is_what_plan_reads(tmp_path):
    store = tmp_path / "store.db"
    script = tmp_path / "slow_data.py"
    script.write_text((SCRIPTS / "slow_data.py").read_text())
    bin_ = Path(sys.executable).parent / "rightsize"
    ran = subprocess.run([str(bin_), "torchrun", "--quiet", "--nproc-per-node", "1",
                          "--database", str(store), "--instance-type", "c5.large", str(script),
                          "--epochs", "3"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=240)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    planned = subprocess.run([str(bin_), "plan", "--script", str(script), "--script-args",
                              "--epochs 3", "--database", str(store), "--global-batch", "32",
                              "--iterations", "1000", "--cloud", "aws", "--json"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    plans = json.loads(planned.stdout)
    assert [p["instance_type"] for p in plans] == ["c5.large"]
    assert plans[0]["measured_by"] == ["slow_data"] and plans[0]["samples_per_s"] > 0
    other = subprocess.run([str(bin_), "plan", "--script", str(script), "--script-args",
                            "--epochs 4", "--database", str(store), "--global-batch", "32",
                            "--iterations", "1000"], capture_output=True, text=True)  # fmt: skip
    assert other.returncode == 2 and "no finished run" in other.stderr  # other arguments
