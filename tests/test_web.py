"""The web pages in a real browser: Playwright driving Debian's Chromium against a real
`rightsize serve` on 127.0.0.1 with a temporary SQLite store, running real jobs.

Skips where Playwright or /usr/bin/chromium is missing (CI installs both: .ci/run).
Writes a screenshot of each page into docs/screenshots/ (README.md shows one).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from rightsize.service.store import Store
from service_helpers import free_port, serve

pytestmark = pytest.mark.integration
CHROMIUM = Path(os.environ.get("RIGHTSIZE_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(__file__).parents[1] / "docs" / "screenshots"
EXAMPLES = Path(__file__).parents[1] / "examples"
SCRIPTS = Path(__file__).parent / "scripts"
#: Chromium as issue 20 runs it: nothing started that would reach the network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
ZONE = "Asia/Tokyo"  # not this machine's: times must show in the viewer's zone
WIDE, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; CI does)",
                allow_module_level=True)  # fmt: skip
expect = playwright_api.expect


@pytest.fixture(scope="module")
def service_store(tmp_path_factory) -> Path:
    """The service's store: a SQLite file that a `rightsize tune` on the host writes too."""
    return tmp_path_factory.mktemp("web") / "store.db"


@pytest.fixture(scope="module")
def service(service_store):
    """A service with 2 CPUs of capacity, a token, and its URL."""
    home, database, port = service_store.parent, service_store, free_port()
    store = Store(str(database))
    token = store.create_token("web-tester")
    store.close()
    process = serve(database, port, home / "serve.log", cpu=2)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    import urllib.request

    while True:
        try:
            urllib.request.urlopen(f"{url}/ui/", timeout=2).read()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise AssertionError((home / "serve.log").read_text()) from None
            time.sleep(0.5)
    yield url, token, process.pid
    process.terminate()
    process.wait(90)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)  # fmt: skip
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=WIDE, locale="en-US", timezone_id=ZONE,
                                  accept_downloads=True)  # fmt: skip
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page, url: str, token: str) -> None:
    page.goto(f"{url}/")
    page.get_by_label("API token").fill(token)
    page.get_by_label("API token").press("Enter")  # the keyboard submits the form
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()


def fill_job(page, name: str, epochs: int, dataset_size: int, policy: str = "static",
             cpu: str = "1") -> None:  # fmt: skip
    page.goto(page.url.split("#")[0] + "#/submit")
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    page.get_by_label("Job name").fill(name)
    page.get_by_label("Workload", exact=True).select_option("wide-deep")
    page.get_by_label("Dataset", exact=True).select_option("synthetic-criteo")
    page.get_by_label("Model options").fill(json.dumps({"embed_dim": 8, "hidden": [64, 32]}))
    page.get_by_label("Dataset size").fill(str(dataset_size))
    page.get_by_label("Batch per worker").fill("512")
    page.get_by_label("Train for").select_option("epochs")
    page.get_by_label("How many").fill(str(epochs))
    page.get_by_label("Strategy").select_option("ps")
    page.get_by_label("CPU budget").fill(cpu)
    page.get_by_label("Memory budget").fill("3Gi")
    page.get_by_label("Policy").select_option(policy)


def points(page, chart: str) -> int:
    path = page.locator(f"#{chart} path.series").first
    return int(path.get_attribute("data-points") or 0)


def test_nothing_shows_without_a_token(page, service):
    url, *_ = service
    page.goto(f"{url}/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.locator("#nav")).to_be_hidden()
    page.goto(f"{url}/ui/#/jobs")  # a deep link without a token lands on the sign-in form
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.get_by_label("API token").fill("rs_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#error-token")).to_have_text("That token is not known to this service.")
    shot(page, "signin")


def test_a_bad_field_is_shown_next_to_it_before_anything_queues(page, service):
    url, token, _ = service
    sign_in(page, url, token)
    fill_job(page, "bad-budget", 1, 4096)
    page.get_by_label("CPU budget").fill("lots")
    page.get_by_label("CPU budget").press("Enter")  # from the keyboard: Enter submits
    error = page.locator('[data-field="budget.cpu"] .error')
    expect(error).to_contain_text("cpu")
    expect(page.locator('[data-field="budget.cpu"]')).to_have_class(re.compile("invalid"))
    expect(page.get_by_label("CPU budget")).to_be_focused()  # focus moves to the bad field
    page.get_by_label("CPU budget").fill("64")  # more than the service's 2 CPUs
    page.get_by_role("button", name="Submit").click()
    expect(error).to_contain_text("capacity")
    shot(page, "submit-error")
    page.goto(f"{url}/ui/#/jobs")
    expect(page.locator("tr[data-job]")).to_have_count(0)  # nothing was queued


def test_cloud_recommendations_wait_for_the_profile_then_show_the_models(page, service):
    url, token, _ = service
    sign_in(page, url, token)
    page.goto(f"{url}/ui/#/submit")
    page.get_by_label("Workload", exact=True).select_option("mlp3")
    page.get_by_label("Dataset", exact=True).select_option("digits")
    page.get_by_label("Instance types").fill("g4dn.xlarg")
    page.get_by_role("button", name="Recommend cloud clusters").click()
    expect(page.locator('[data-field="instances"] .error')).to_contain_text("g4dn.xlarge")
    page.get_by_label("Global batch").fill("8192")
    page.get_by_label("Iterations").fill("5000")
    page.get_by_label("Instance types").fill("g4dn.xlarge:16,p3.2xlarge:16,g5.xlarge:16")
    page.get_by_label("Scala-Opt-M worker type").fill("g5.xlarge")
    page.get_by_role("button", name="Recommend cloud clusters").click()
    # the service profiles mlp3 on this machine first (a real `rightsize profile`)
    expect(page.locator("#profiling")).to_contain_text("Profiling mlp3")
    srift = page.locator("#srift-plans tbody tr")
    expect(srift.first).to_contain_text("device model", timeout=480_000)
    expect(page.locator("#srift-plans")).to_contain_text("cap")  # the baselines beside
    fc2 = page.locator("#fc2-plans tbody tr")
    expect(fc2).to_have_count(4)
    for row, name in enumerate(("cost-opt", "time-opt", "scala-opt", "scala-opt-m")):
        expect(fc2.nth(row)).to_contain_text(name)
    expect(fc2.nth(3)).to_contain_text("g5.xlarge")
    expect(page.locator("#fc2-plans")).to_contain_text("dlrover-eq1")
    expect(page.locator("#fc2-plans")).to_contain_text("not the lowest total cost")
    shot(page, "recommendations")


TRACE = "arrival,duration,cpu,model\n" + "".join(
    f"{i * 5}m,{40 + 10 * i}m,{10 + 5 * (i % 3)},resnet50\n" for i in range(6))


def test_a_simulation_on_an_uploaded_trace(page, service, tmp_path):
    url, token, _ = service
    sign_in(page, url, token)
    page.goto(f"{url}/ui/#/simulations")
    page.get_by_label("Trace", exact=True).select_option("upload")
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival,duration\n0,1h\n")
    page.get_by_label("Trace CSV").set_input_files(str(bad))
    page.get_by_role("button", name="Run the simulation").click()
    expect(page.locator('[data-field="trace_csv"] .error')).to_contain_text("cpu")
    good = tmp_path / "six-jobs.csv"
    good.write_text(TRACE)
    page.get_by_label("Trace CSV").set_input_files(str(good))
    for name in ("nearchus+", "optimus", "fa-bf"):
        page.get_by_label(name, exact=True).uncheck()
    page.get_by_role("button", name="Run the simulation").click()
    expect(page.get_by_role("heading", name=re.compile("Simulation #"))).to_be_visible()
    expect(page.locator("#phase")).to_have_text("finished", timeout=300_000)
    expect(page.locator("dl.facts")).to_contain_text("six-jobs")
    rows = page.locator("#policies tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#policies")).to_contain_text("nearchus")
    expect(page.locator("#policies")).to_contain_text("dlrover")
    for plot in ("#plot-jct img", "#plot-utilization img", "#plot-throughput img"):
        expect(page.locator(plot)).to_be_visible()
    assert page.locator("#plot-jct img").evaluate("img => img.naturalWidth") > 100
    shot(page, "simulation")


def test_a_packed_hyperband_study(page, service, service_store, tmp_path):
    url, token, _ = service
    report = tmp_path / "search.json"
    # a search on the host, into the service's store with the user's token: no upload
    searched = subprocess.run(
        [sys.executable, "-m", "rightsize", "tune", "--workload", "mlp3", "--dataset", "digits",
         "--space", str(EXAMPLES / "spaces" / "small.yaml"), "--max-resource", "9", "--eta", "3",
         "--steps-per-unit", "2", "--pack", "knn", "--seed", "4", "--threads", "1", "--json",
         # the page must show packs: without the gate, which may split them on timings
         "--quiet", "--no-pack-gate", "--database", str(service_store), "--name", "searched-here"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "RIGHTSIZE_TOKEN": token})  # fmt: skip
    assert searched.returncode == 0, searched.stderr
    report.write_text(searched.stdout)
    expected = json.loads(searched.stdout)
    assert expected["stored"]["owner"] == "token"
    sign_in(page, url, token)
    page.goto(f"{url}/ui/#/studies")
    kept = page.locator('tr[data-study="searched-here"]')
    expect(kept).to_contain_text("yours")
    expect(kept).to_contain_text(f"{expected['best']['val_loss']:.4g}")
    kept.get_by_role("link", name="searched-here").click()
    expect(page.get_by_role("heading", name="Study searched-here")).to_be_visible()
    expect(page.locator("#best")).to_contain_text(expected["best"]["trial_id"])
    # and a report from elsewhere, uploaded
    page.goto(f"{url}/ui/#/studies")
    bad = tmp_path / "not-a-report.json"
    bad.write_text(json.dumps({"workload": "mlp3"}))
    page.get_by_label("Search report").set_input_files(str(bad))
    page.get_by_role("button", name="Keep the study").click()
    said = page.locator('[data-field="report"] .error')
    expect(said).to_contain_text("rungs: Field required")  # each missing field by its name
    expect(said).not_to_contain_text("; Field required")
    page.get_by_label("Study name").fill("small-space")
    page.get_by_label("Search report").set_input_files(str(report))
    page.get_by_role("button", name="Keep the study").click()
    expect(page.get_by_role("heading", name="Study small-space")).to_be_visible()
    expect(page.locator("#best")).to_contain_text(expected["best"]["trial_id"])
    expect(page.locator("#rungs tbody tr")).to_have_count(len(expected["rungs"]))
    packed = max(len(pack) for rung in expected["rungs"] for pack in rung["packs"])
    assert packed > 1  # knn packed trials together, and the page lists them
    expect(page.locator("#rungs")).to_contain_text("pack 1: ")
    expect(page.locator("#chart-trials path.series")).to_have_count(len(expected["trials"]))
    shot(page, "study")


def test_an_uploaded_workload_runs_only_inside_its_jobs_cgroups(page, service, tmp_path):
    url, token, service_pid = service
    sign_in(page, url, token)
    page.goto(f"{url}/ui/#/submit")
    page.get_by_label("Workload", exact=True).select_option("__upload__")
    expect(page.get_by_label("Dataset", exact=True)).to_be_hidden()
    broken = tmp_path / "broken.py"
    broken.write_text("def make_workload(:\n    pass\n")
    page.get_by_label("Workload file").set_input_files(str(broken))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator('[data-field="source"] .error')).to_contain_text("line 1")
    page.get_by_label("Factory function").fill("build_it")
    page.get_by_label("Workload file").set_input_files(str(EXAMPLES / "my_workload.py"))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator('[data-field="factory"] .error')).to_contain_text("make_workload")
    page.get_by_label("Factory function").fill("make_workload")
    page.get_by_label("Job name").fill("own-model")
    page.get_by_label("Batch per worker").fill("64")
    page.get_by_label("Train for").select_option("steps")
    page.get_by_label("How many").fill("600")
    page.get_by_label("Strategy").select_option("ps")
    page.get_by_label("CPU budget").fill("1")
    page.get_by_label("Memory budget").fill("3Gi")
    page.get_by_label("Policy").select_option("static")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_role("heading", name="own-model")).to_be_visible()
    expect(page.locator("#phase")).to_have_text("running", timeout=120_000)
    # the runner, which builds the uploaded model, sits in a cgroup capped at the budget
    runner_cgroups = _runner_cgroups(service_pid)
    assert runner_cgroups, "no runner cgroup for the uploaded workload"
    quota, period = runner_cgroups[0]
    assert quota / period == pytest.approx(1.0)
    expect(page.locator("#phase")).to_have_text("finished", timeout=300_000)
    expect(page.locator("#accounting")).to_have_text("every sample trained exactly once per epoch")
    assert _runner_cgroups(service_pid) == []  # removed with its runner


def _runner_cgroups(service_pid: int) -> list[tuple[int, int]]:
    """(quota, period) of each uploaded-code runner cgroup with a process in it (v1 or v2)."""
    found = []
    for base in (Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")):
        for job in (base / "rightsize" / f"{service_pid}-uploads").glob("job-*"):
            if not (job / "cgroup.procs").read_text().split():
                continue
            if (job / "cpu.max").exists():
                quota, period = (job / "cpu.max").read_text().split()
            else:
                quota = (job / "cpu.cfs_quota_us").read_text()
                period = (job / "cpu.cfs_period_us").read_text()
            found.append((int(quota), int(period)))
        if found:
            return found
    return found


def fill_script_job(page, url: str, name: str, script: Path) -> None:
    page.goto(f"{url}/ui/#/submit")
    page.get_by_label("your own training script").check()
    expect(page.get_by_label("Workload", exact=True)).to_be_hidden()
    expect(page.get_by_label("Policy")).to_have_value("goodput")  # a script's default
    page.get_by_label("Job name").fill(name)
    page.get_by_label("Training script", exact=True).set_input_files(str(script))


def test_a_script_that_does_not_parse_is_shown_by_its_file_field(page, service, tmp_path):
    url, token, _ = service
    sign_in(page, url, token)
    broken = tmp_path / "broken.py"
    broken.write_text("def main(:\n    pass\n")
    fill_script_job(page, url, "broken-script", broken)
    page.get_by_role("button", name="Submit").click()
    error = page.locator('[data-field="script"] .error')
    expect(error).to_contain_text("line 1")
    expect(page.locator('[data-field="script"]')).to_have_class(re.compile("invalid"))
    expect(page.get_by_label("Training script", exact=True)).to_be_focused()
    # the file parses now; a rank's CPU the job refuses is shown by its own field
    page.get_by_label("Training script", exact=True).set_input_files(str(SCRIPTS / "no_save.py"))
    page.get_by_label("CPU per rank").fill("lots")
    page.get_by_role("button", name="Submit").click()
    rank_cpu = page.locator('[data-field="initial_shape.workers.cpu"] .error')
    expect(rank_cpu).to_contain_text("cpu 'lots'")
    expect(error).to_be_empty()
    jobs = page.request.get(f"{url}/jobs", headers={"Authorization": f"Bearer {token}"}).json()
    assert "broken-script" not in [j["name"] for j in jobs]  # nothing was queued


def test_an_uploaded_script_runs_on_its_ranks_to_the_end(page, service):
    url, token, _ = service
    sign_in(page, url, token)
    fill_script_job(page, url, "own-script", SCRIPTS / "no_save.py")
    page.get_by_label("Script arguments").fill("--steps 300")
    page.get_by_label("Ranks", exact=True).fill("1")
    page.get_by_label("CPU per rank").fill("1")
    page.get_by_label("Memory per rank").fill("1Gi")
    page.get_by_label("CPU budget").fill("1")
    page.get_by_label("Memory budget").fill("2Gi")
    page.get_by_label("Policy").select_option("static")
    page.get_by_role("button", name="Preview").click()  # the script is uploaded for it
    expect(page.locator("#preview")).to_contain_text("1 worker")
    shot(page, "submit-script")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_role("heading", name="own-script")).to_be_visible()
    expect(page.locator("#script")).to_contain_text("no_save.py")
    expect(page.locator("#args")).to_have_text("--steps 300")
    expect(page.locator("#phase")).to_have_text("finished", timeout=300_000)
    expect(page.locator("#moves")).to_be_visible()  # the report's moves (static: none)
    page.goto(f"{url}/ui/#/jobs")
    expect(page.locator('tr[data-job="own-script"]')).to_contain_text("no_save.py --steps 300")


def test_submit_follow_cancel_and_compare_real_jobs(page, service):
    url, token, _ = service
    sign_in(page, url, token)
    # the recommendation before submitting: the launch shape and its predicted time
    fill_job(page, "watched", 3, 200_000, policy="nearchus+", cpu="2")
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("#preview")
    expect(preview).to_contain_text("launch shape")
    expect(preview).to_contain_text("wide-deep's profile")
    shot(page, "submit")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_role("heading", name="watched")).to_be_visible()
    # two more behind it on the service's 2 CPUs: one that runs after it, and one that is
    # cancelled while it waits
    # (four epochs: enough one-second samples for the comparison below on a quiet host too)
    for name, epochs in (("beside", 4), ("cancelled-one", 20)):
        fill_job(page, name, epochs, 200_000)
        page.get_by_role("button", name="Submit").click()
        expect(page.get_by_role("heading", name=name)).to_be_visible()
    expect(page.locator("#phase")).to_have_text("waiting")
    expect(page.locator("#no-samples")).to_contain_text("No metric samples yet")
    expect(page.locator("#chart-throughput")).to_be_hidden()  # not five empty charts
    page.once("dialog", lambda dialog: dialog.dismiss())  # asked first: "no" keeps it
    page.get_by_role("button", name="Cancel").click()
    page.wait_for_timeout(1000)
    expect(page.locator("#phase")).to_have_text("waiting")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#phase")).to_have_text("cancelled", timeout=60_000)
    # live: the watched job's charts gain points and NEARCHUS+ grows it on the timeline
    page.goto(f"{url}/ui/#/jobs/watched")
    expect(page.locator("#phase")).to_have_text("running", timeout=120_000)
    expect(page.locator("#timeline tbody tr").first).to_contain_text("launch", timeout=60_000)
    expect(page.locator("#chart-throughput path.series")).to_have_count(1, timeout=90_000)
    first = points(page, "chart-throughput")
    page.wait_for_function(
        f"document.querySelector('#chart-throughput path.series').dataset.points > {first + 6}",
        timeout=60_000)  # fmt: skip
    expect(page.locator("#chart-loss path.series")).to_have_count(1, timeout=120_000)
    page.wait_for_function("document.querySelectorAll('#timeline tbody tr').length > 1",
                           timeout=120_000)  # fmt: skip
    expect(page.locator("#nodes tbody tr").first).to_contain_text("cores")
    shot(page, "run")
    # the queue, with times in the viewer's zone
    page.goto(f"{url}/ui/#/jobs")
    row = page.locator('tr[data-job="watched"]')
    local = datetime.fromtimestamp(_submitted_at(page, url, token, "watched"), ZoneInfo(ZONE))
    expect(row).to_contain_text(f"{local:%b} {local.day}, {local.year}, {local:%-I:%M:%S %p}")
    expect(row).to_contain_text("samples/s")
    shot(page, "queue")
    page.set_viewport_size(PHONE)
    shot(page, "queue-phone")
    # at a phone's width the page itself does not scroll sideways (wide tables scroll alone)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.set_viewport_size(WIDE)
    # the watched job to its end: measured beside predicted, exactly once
    page.goto(f"{url}/ui/#/jobs/watched")
    expect(page.locator("#phase")).to_have_text("finished", timeout=300_000)
    expect(page.locator("#accounting")).to_have_text("every sample trained exactly once per epoch")
    expect(page.locator("#time-compare")).to_contain_text("measured")
    expect(page.locator("#time-compare")).to_contain_text("of it")  # the launch, shown within
    with page.expect_download() as download:
        page.get_by_role("button", name="Download report JSON").click()
    report = json.loads(Path(download.value.path()).read_text())
    assert report["accounting"]["exactly_once"] is True
    # past runs: filter, sort, compare the two that trained
    page.goto(f"{url}/ui/#/jobs/beside")
    expect(page.locator("#phase")).to_have_text("finished", timeout=300_000)
    page.goto(f"{url}/ui/#/runs")
    page.get_by_label("Filter").fill("wide-deep")  # this test's three (others ran before it)
    expect(page.locator("#runs tbody tr")).to_have_count(3)
    page.get_by_label("Filter").fill("cancel")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    page.get_by_label("Filter").fill("")
    page.locator('button[data-sort="name"]').click()
    expect(page.locator("#runs tbody tr").first).to_have_attribute("data-job", "beside")
    page.get_by_label("compare watched").check()
    page.get_by_label("compare beside").check()
    shot(page, "runs")
    page.get_by_role("button", name="Compare selected").click()
    expect(page.locator("#comparison tbody tr")).to_have_count(2)
    series = page.locator("#chart-throughput path.series")
    expect(series).to_have_count(2)
    assert all(int(series.nth(i).get_attribute("data-points")) > 5 for i in range(2))
    shot(page, "compare")


def _submitted_at(page, url: str, token: str, name: str) -> float:
    answer = page.request.get(f"{url}/jobs/{name}", headers={"Authorization": f"Bearer {token}"})
    return answer.json()["job"]["submitted_at"]
