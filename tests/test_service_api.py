"""The API: tokens, owners, bad input naming its field, cancel; and a schemathesis run.

The allocator is never started here, so nothing launches: submitted jobs wait.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from rightsize.core.resources import Resources  # noqa: E402
from rightsize.service.allocator import Allocator  # noqa: E402
from rightsize.service.app import create_app  # noqa: E402
from rightsize.service.store import Store  # noqa: E402

GI = 2**30
JOB = {"name": "digits", "workload": "mlp3", "dataset": "digits", "batch_size": 64, "steps": 50,
       "budget": {"cpu": 1, "memory": "2Gi"}}  # fmt: skip


@pytest.fixture
def service(tmp_path):
    store = Store(str(tmp_path / "store.db"))
    allocator = Allocator(store, Resources(1.5, 8 * GI), tmp_path / "work")
    client = TestClient(create_app(store, allocator))
    tokens = {name: store.create_token(name) for name in ("alice", "bob")}
    yield client, tokens, allocator
    store.close()


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def test_every_route_needs_a_token(service):
    client, tokens, _ = service
    for method, path in (("get", "/jobs"), ("post", "/jobs"), ("get", "/jobs/x"),
                         ("get", "/jobs/x/samples"), ("post", "/jobs/x/cancel"), ("get", "/me"),
                         ("get", "/queue"), ("get", "/choices"), ("post", "/jobs/preview"),
                         ("post", "/recommendations")):  # fmt: skip
        assert getattr(client, method)(path).status_code == 401
        assert getattr(client, method)(path, headers=auth("rs_wrong")).status_code == 401
    assert client.get("/jobs", headers=auth(tokens["alice"])).status_code == 200


def test_choices_say_the_capacity_a_forms_defaults_must_fit(service):
    client, tokens, _ = service
    found = client.get("/choices", headers=auth(tokens["alice"])).json()
    assert found["capacity"] == {"cpu": 1.5, "memory": 8 * GI}
    # the page's defaults at this capacity: 1.5 CPU and dlrover, which the service accepts
    job = {**JOB, "budget": {"cpu": 1.5, "memory": "4Gi"}, "policy": {"name": "dlrover"},
           "initial_shape": "auto"}  # fmt: skip
    answer = client.post("/jobs/preview", json=job, headers=auth(tokens["alice"]))
    assert answer.status_code == 200, answer.text


def test_the_open_routes_are_the_documented_ones(service):
    from fastapi.routing import APIRoute

    client, _, _ = service
    open_routes = set()
    for route in client.app.routes:
        needs = isinstance(route, APIRoute) and any(
            d.call.__name__ == "_owner" for d in route.dependant.dependencies)
        if not needs:
            open_routes.add(route.path)
    assert open_routes == {"/", "/ui", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                           "/redoc"}, open_routes  # fmt: skip
    documented = (Path(__file__).parents[1] / "docs" / "service.md").read_text()
    for path in ("`GET /`", "`GET /ui/...`", "`GET /openapi.json`", "`GET /docs`",
                 "`GET /redoc`"):  # fmt: skip
        assert path in documented


def test_a_huge_request_is_refused_without_being_echoed(service):
    client, tokens, allocator = service
    from rightsize.service.limits import MAX_BODY_BYTES

    huge = client.post("/jobs", json={**JOB, "name": "x" * (MAX_BODY_BYTES + 1)},
                       headers=auth(tokens["alice"]))  # fmt: skip
    assert huge.status_code == 413 and "16 MiB" in huge.json()["detail"]
    name = "x" * 10**6  # under the limit, and not a plain name: 422 without the input
    answer = client.post("/jobs", json={**JOB, "name": name}, headers=auth(tokens["alice"]))
    assert answer.status_code == 422 and len(answer.content) < 2000, len(answer.content)
    assert answer.json()["detail"][0]["loc"] == ["body", "name"]
    assert allocator.scheduler.waiting == []


def test_submit_queues_and_a_token_sees_only_its_own(service):
    client, tokens, allocator = service
    answer = client.post("/jobs", json=JOB, headers=auth(tokens["alice"]))
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert job["phase"] == "waiting" and job["name"] == "digits"
    assert [j.name for j in allocator.scheduler.waiting] == ["digits"]
    again = client.post("/jobs", json=JOB, headers=auth(tokens["alice"])).json()
    assert again["name"] == "digits-2"
    assert client.get("/jobs/digits", headers=auth(tokens["bob"])).status_code == 404
    assert client.post("/jobs/digits/cancel", headers=auth(tokens["bob"])).status_code == 404
    assert client.get("/jobs", headers=auth(tokens["bob"])).json() == []
    mine = client.get("/jobs", headers=auth(tokens["alice"])).json()
    assert [j["name"] for j in mine] == ["digits", "digits-2"]
    detail = client.get("/jobs/digits", headers=auth(tokens["alice"])).json()
    assert detail["job"]["budget"] == {"cpu": 1.0, "memory": 2 * GI, "gpus": 0}
    assert detail["shapes"] == [] and detail["latest"] is None


def test_cancel_a_waiting_job(service):
    client, tokens, allocator = service
    client.post("/jobs", json=JOB, headers=auth(tokens["alice"]))
    job = client.post("/jobs/digits/cancel", headers=auth(tokens["alice"])).json()
    assert job["phase"] == "cancelled"
    assert allocator.scheduler.waiting == []
    again = client.post("/jobs/digits/cancel", headers=auth(tokens["alice"]))
    assert again.status_code == 200 and again.json()["phase"] == "cancelled"
    listed = client.get("/jobs?phase=cancelled", headers=auth(tokens["alice"])).json()
    assert [j["name"] for j in listed] == ["digits"]


@pytest.mark.parametrize("change, field, reason", [
    ({"budget": {"cpu": 4, "memory": "2Gi"}}, ["body", "budget", "cpu"], "capacity"),
    ({"budget": {"cpu": 1, "memory": "64Gi"}}, ["body", "budget", "memory"], "capacity"),
    ({"workload": "resnet81"}, ["body", "workload"], "resnet18"),
    ({"dataset": "digitz"}, ["body", "dataset"], "digits"),
    ({"policy": {"name": "nearchuss"}}, ["body", "policy"], "nearchus"),
    ({"batch_size": 0}, ["body", "batch_size"], "greater than or equal to 1"),
    ({"budget": {"cpu": "lots", "memory": "2Gi"}}, ["body", "budget", "cpu"], "cpu"),
    ({"epochs": 2, "steps": 5}, ["body"], "either epochs or steps"),
    ({"colour": "blue"}, ["body", "colour"], "Extra inputs"),
    ({"policy": {"name": "nearchus+"}}, ["body", "budget"], "minimal shape"),
])  # fmt: skip
def test_bad_input_is_a_422_naming_the_field(service, change, field, reason):
    client, tokens, allocator = service
    answer = client.post("/jobs", json={**JOB, **change}, headers=auth(tokens["alice"]))
    assert answer.status_code == 422, answer.text
    errors = answer.json()["detail"]
    assert any(e["loc"][: len(field)] == field and reason in e["msg"] for e in errors), errors
    assert allocator.scheduler.waiting == []  # nothing queued
    assert client.get("/jobs", headers=auth(tokens["alice"])).json() == []


def test_the_schema_documents_the_routes(service):
    client, _, _ = service
    schema = client.get("/openapi.json").json()
    assert {"/jobs", "/jobs/{name}", "/jobs/{name}/samples", "/jobs/{name}/cancel",
            "/jobs/{name}/report"} <= set(schema["paths"])  # fmt: skip
    assert "HTTPBearer" in schema["components"]["securitySchemes"]


def test_preview_says_where_a_job_would_start_and_queues_nothing(service):
    client, tokens, allocator = service
    job = {**JOB, "workload": "wide-deep", "dataset": "synthetic-criteo", "batch_size": 512,
           "dataset_size": 10_000, "epochs": 1, "initial_shape": "auto",
           "policy": {"name": "static"}}  # fmt: skip
    del job["steps"]
    answer = client.post("/jobs/preview", json=job, headers=auth(tokens["alice"]))
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["source"] == "policy" and preview["fits_now"] and preview["waiting"] == 0
    assert 0 < preview["cpu_cores"] <= 1  # within the 1-CPU budget
    assert preview["predicted_time_s"] > 0 and "wide-deep's profile" in preview["predicted_note"]
    assert allocator.scheduler.waiting == [] and client.get(
        "/jobs", headers=auth(tokens["alice"])).json() == []  # fmt: skip
    bad = client.post("/jobs/preview", json={**job, "budget": {"cpu": 8, "memory": "2Gi"}},
                      headers=auth(tokens["alice"]))  # fmt: skip
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "budget", "cpu"]


def test_queue_rows_carry_the_newest_sample_and_the_samples_to_train(service):
    client, tokens, _ = service
    client.post("/jobs", json=JOB, headers=auth(tokens["alice"]))
    [row] = client.get("/queue", headers=auth(tokens["alice"])).json()
    assert row["job"]["name"] == "digits" and row["latest"] is None
    assert row["job"]["samples_total"] == 50 * 64
    assert client.get("/queue", headers=auth(tokens["bob"])).json() == []
    assert client.get("/me", headers=auth(tokens["bob"])).json() == {"name": "bob"}
    choices = client.get("/choices", headers=auth(tokens["bob"])).json()
    mlp3 = next(m for m in choices["models"] if m["name"] == "mlp3")
    assert "digits" in mlp3["datasets"] and "nearchus+" in choices["policies"]


def test_recommendations_from_the_services_profile(service, tmp_path):
    client, tokens, allocator = service
    from profile_factory import linear_profile

    (allocator.workdir / "profiles").mkdir(parents=True)
    from rightsize.profiling.profile import TensorCounts

    # the tensor counts the service's profiler records (TensorFlow's PS costs per tensor)
    counted = linear_profile().model_copy(update={"tensors": TensorCounts(parameters=6, state=0)})
    counted.save(allocator.workdir / "profiles" / "mlp3-digits-cpu.json")
    body = {"workload": "mlp3", "dataset": "digits", "global_batch": 512, "iterations": 1000,
            "instances": "g4dn.xlarge:8,p3.2xlarge:8", "constraints": {"deadline": "2h"}}  # fmt: skip
    answer = client.post("/recommendations", json=body, headers=auth(tokens["alice"]))
    assert answer.status_code == 200, answer.text
    found = answer.json()
    plans = found["srift"]["plans"]
    assert plans and all("device model" in json.dumps(p["models"]) for p in plans)
    assert {p["policy"] for p in found["srift"]["baselines"]} <= {"cap", "tap"}
    assert [p["policy"] for p in found["fc2"]["plans"]] == ["cost-opt", "time-opt", "scala-opt"]
    # each says what it picks by: "cost-opt" is the cheapest per hour, not the cheapest job
    said = {p["policy"]: p["optimises"] for p in found["fc2"]["plans"] + plans}
    assert "not the lowest total cost" in said["cost-opt"] and said["srift"]
    assert all(p["total_cost"] > 0 and p["price_per_hour"] > 0 for p in found["fc2"]["plans"])
    # FC2 plans for the PS framework asked for, and says which (default: rightsize's own)
    assert found["fc2"]["ps_framework"] == "rightsize" and found["fc2"]["default"]
    grpc = client.post("/recommendations", json={**body, "ps_framework": "tensorflow1-grpc"},
                       headers=auth(tokens["alice"])).json()["fc2"]  # fmt: skip
    assert grpc.get("ps_framework") == "tensorflow1-grpc" and not grpc["default"], grpc
    times = {p["policy"]: p["total_seconds"] for p in found["fc2"]["plans"]}
    assert any(p["total_seconds"] != times[p["policy"]] for p in grpc["plans"])
    for change, field in ((("instances", "g4dn.xlarg"), "instances"),
                          (("workload", "pkg.mod:factory"), "workload"),
                          (("dataset", "no-such-data"), "workload"),
                          (("ps_framework", "tensorflow2"), "ps_framework"),
                          (("global_batch", 0), "global_batch")):  # fmt: skip
        bad = client.post("/recommendations", json={**body, change[0]: change[1]},
                          headers=auth(tokens["alice"]))  # fmt: skip
        assert bad.status_code == 422, (change, bad.text)
        assert bad.json()["detail"][0]["loc"][:2] == ["body", field], bad.text


def test_a_simulation_is_checked_before_it_runs(service):
    client, tokens, allocator = service
    alice = auth(tokens["alice"])
    for body, field in (({"cluster": "Z"}, "cluster"), ({"policies": ["nearchos"]}, "policies"),
                        ({"trace": "upload"}, "trace_csv"), ({"trace": "nope"}, "trace"),
                        ({"trace": "upload", "trace_csv": "arrival,duration\n0,1h\n"},
                         "trace_csv"), ({"cluster": "cpu=4"}, "cluster"),
                        ({"cluster": "cpu=4,net_gbps=0"}, "cluster"),
                        ({"cluster": "cpu=1,net_gbps=1"}, "trace")):  # fmt: skip
        answer = client.post("/simulations", json=body, headers=alice)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["detail"][0]["loc"] == ["body", field], answer.text
        assert "--" not in answer.json()["detail"][0]["msg"], answer.text  # a form has no flags
        assert str(allocator.workdir) not in answer.text  # no paths on the server
    assert client.get("/simulations", headers=alice).json() == []
    assert client.get("/simulations/1", headers=alice).status_code == 404


def test_a_policy_that_profiles_shapes_first_gets_their_predicted_speeds(service):
    # FA-BF searches every (p, w) before launch (NEARCHUS §V); the service answers that
    # search from the workload's profile instead of running each shape
    client, tokens, _ = service
    job = {**JOB, "workload": "wide-deep", "dataset": "synthetic-criteo", "batch_size": 512,
           "dataset_size": 10_000, "epochs": 1, "initial_shape": "auto",
           "policy": {"name": "fa-bf", "params": {"cores_per_node": 0.25}}}  # fmt: skip
    del job["steps"]
    answer = client.post("/jobs/preview", json=job, headers=auth(tokens["alice"]))
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["source"] == "prediction"
    assert "fastest of 6 searched shapes" in preview["reason"]  # (p, w) on 4 nodes of 0.25
    user = {**job, "workload": "mypkg.models:factory"}  # no profile: nothing to search with
    refused = client.post("/jobs/preview", json=user, headers=auth(tokens["alice"]))
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"][:2] == ["body", "budget"]


def test_a_study_is_a_checked_tune_report_seen_only_by_its_owner(service):
    client, tokens, allocator = service
    rung = {"bracket": 0, "rung": 0, "n": 2, "r": 9, "packs": [["s0-000", "s0-001"]],
            "losses": {"s0-000": 0.5, "s0-001": 0.7}}  # fmt: skip
    report = {"workload": "mlp3", "dataset": "digits", "max_resource": 9, "eta": 3,
              "best": {"trial_id": "s0-000", "val_loss": 0.5}, "trials": {"s0-000": {},
              "s0-001": {}}, "rungs": [rung], "wall_s": 1.0}  # fmt: skip
    alice = auth(tokens["alice"])
    kept = client.post("/studies", json={"name": "s", "report": report}, headers=alice)
    assert kept.status_code == 201, kept.text
    assert kept.json()["best"]["val_loss"] == 0.5 and kept.json()["report"] is None
    whole = client.get(f"/studies/{kept.json()['id']}", headers=alice).json()
    assert whole["report"]["rungs"][0]["packs"] == [["s0-000", "s0-001"]]
    assert client.get(f"/studies/{kept.json()['id']}", headers=auth(tokens["bob"])).status_code == 404
    assert client.get("/studies", headers=auth(tokens["bob"])).json() == []
    # one that `rightsize tune` wrote on the host without a token: every token sees it
    host = allocator.store.add_study(None, "host-search", report)
    for token in tokens.values():
        seen = client.get("/studies", headers=auth(token)).json()
        assert [(s["name"], s["host"]) for s in seen if s["host"]] == [("host-search", True)]
        assert client.get(f"/studies/{host.id}", headers=auth(token)).json()["report"] == report
    bad = client.post("/studies", json={"name": "s", "report": {**report, "eta": 1}}, headers=alice)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:3] == ["body", "report", "eta"]


def test_an_uploaded_workload_is_checked_without_running_it_and_only_its_owner_uses_it(service):
    client, tokens, allocator = service
    alice, bob = auth(tokens["alice"]), auth(tokens["bob"])
    marker = allocator.workdir / "ran"
    source = (f"open({str(marker)!r}, 'w').write('the service ran me')\n"
              "def make_workload():\n    raise RuntimeError\n")  # fmt: skip
    for body, field in (({"source": "def make_workload(:\n"}, "source"),
                        ({"factory": "build"}, "factory"), ({"name": "Bad Name"}, "name")):  # fmt: skip
        bad = client.post("/workloads", json={"name": "mine", "source": source, **body},
                          headers=alice)  # fmt: skip
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", field]
    kept = client.post("/workloads", json={"name": "mine", "source": source}, headers=alice)
    assert kept.status_code == 201, kept.text
    workload = kept.json()["workload"]
    assert workload.endswith(":make_workload") and not marker.exists()  # never imported
    job = {**JOB, "workload": workload}
    assert client.post("/jobs", json=job, headers=bob).json()["detail"][0]["loc"] == [
        "body", "workload"]  # fmt: skip
    assert client.post("/jobs", json=job, headers=alice).status_code == 201
    assert not marker.exists()
