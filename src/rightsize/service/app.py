"""The REST API (FastAPI): submit, list, follow and cancel jobs, each behind a bearer token.

Every API route needs ``Authorization: Bearer TOKEN`` (401 without, or with a token the
store does not know; the pages and the API's description are open, docs/service.md); a token sees and cancels only its own jobs (404 for anyone
else's, so a job's existence is not told either). A job file is validated by the same
pydantic model ``rightsize run`` uses (core/spec.py), and what the service checks
beyond it (the budget against its capacity, the policy, the zoo's names) fails with
422 naming the field and the reason, before anything is queued. The OpenAPI schema is
at ``/openapi.json``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from rightsize import __version__
from rightsize.core.errors import RightsizeError
from rightsize.core.spec import JobSpec, Strategy
from rightsize.service import limits, live, web
from rightsize.service.allocator import Allocator
from rightsize.service.models import JobPhase
from rightsize.service.profiles import ProfileBook, ProfilingPhase, ProfilingState
from rightsize.service.recommendations import RecommendationRequest, recommend
from rightsize.service.schemas import (
    JobDetail,
    JobView,
    LaunchPreview,
    QueueRow,
    SampleView,
    SimulationView,
    StudyUpload,
    StudyView,
)
from rightsize.service.simulations import SimulationRequest, Simulations
from rightsize.service.store import Store
from rightsize.service.uploads import ScriptUpload, WorkloadUpload

_bearer = HTTPBearer(auto_error=False, description="a token from `rightsize serve token create`")


def _owner(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> int:
    """The id of the token's owner; 401 without a token the store knows."""
    store: Store = request.app.state.store
    found = store.owner(credentials.credentials) if credentials else None
    if found is None:
        raise HTTPException(401, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
    return found


Owner = Annotated[int, Depends(_owner)]


def job_choices() -> dict[str, Any]:
    """The zoo's models (each with the datasets it trains on), datasets and policies."""
    from rightsize.scaling.registry import policy_names
    from rightsize.workloads.registry import WorkloadRegistry

    return {**WorkloadRegistry().listing(), "policies": policy_names(),
            "strategies": [str(s) for s in Strategy],
            # what may size each strategy's jobs (a script's ranks are allreduce)
            "policies_by_strategy": {str(s): policy_names(s) for s in Strategy}}  # fmt: skip


def create_app(store: Store, allocator: Allocator, profiles: ProfileBook | None = None,
               simulations: Simulations | None = None) -> FastAPI:  # fmt: skip
    """The API over ``store`` and ``allocator`` (which the caller starts and stops); the
    workloads' profiles for recommendations and the simulations under the allocator's
    workdir unless given."""
    profiles = profiles or ProfileBook(allocator.workdir / "profiles")
    simulations = simulations or Simulations(store, allocator.workdir / "simulations")
    app = FastAPI(title="rightsize", version=__version__,
                  description="Submit training jobs, follow them, and read past runs.")  # fmt: skip

    app.state.store = store
    limits.install(app)

    def own_job(name: str, owner_id: int) -> JobView:
        job = store.job(name, owner_id)
        if job is None:
            raise HTTPException(404, f"no job named {name!r}")
        return job

    @app.exception_handler(RightsizeError)
    async def refused(_request: Request, exc: RightsizeError) -> JSONResponse:
        if exc.field:  # named where it was raised
            loc, msg = ["body", *exc.field.split(".")], limits.short(exc.reason)
        else:
            loc, msg = ["body"], limits.short(str(exc))
        return JSONResponse(status_code=422, content={"detail": [
            {"loc": loc, "msg": msg, "type": "value_error"}]})  # fmt: skip

    @app.get("/me", summary="who the token belongs to")
    def me(owner_id: Owner) -> dict[str, str]:
        return {"name": store.token_name(owner_id)}

    @app.get("/choices", summary="what a job file may name: zoo models, datasets, policies")
    def choices(_owner_id: Owner) -> dict[str, Any]:
        # with the service's capacity, so that a form's defaults fit what it will accept
        return {**job_choices(), "capacity": {"cpu": allocator.capacity.cpu_cores,
                                              "memory": allocator.capacity.memory_bytes}}  # fmt: skip

    @app.post("/jobs/preview", response_model=LaunchPreview,
              summary="where the service would start a job, and its predicted time; queues nothing")  # fmt: skip
    def preview(spec: JobSpec, owner_id: Owner) -> LaunchPreview:
        return allocator.preview(spec, owner_id)

    @app.post("/workloads", status_code=201, summary="upload a Python file defining a "
              "workload factory; answers the `workload` a job file names it by")  # fmt: skip
    def upload(body: WorkloadUpload, owner_id: Owner) -> dict[str, str]:
        return {"workload": allocator.uploads.save(owner_id, body)}

    @app.post("/scripts", status_code=201, summary="upload a training script (a torchrun "
              "script run unchanged on every rank); answers the `script` a job file names it by")  # fmt: skip
    def upload_script(body: ScriptUpload, owner_id: Owner) -> dict[str, str]:
        return {"script": allocator.uploads.save_script(owner_id, body)}

    @app.post("/recommendations", summary="Srift's plans and FC2's recommendations for a "
              "workload (202 while its profile is being measured)",
              responses={202: {"description": "the workload is being profiled: ask again"},
                         409: {"description": "its profile could not be measured"}})  # fmt: skip
    def recommendations(body: RecommendationRequest, _owner_id: Owner,
                        response: Response) -> dict[str, Any]:  # fmt: skip
        answer = recommend(body, profiles, store)
        if not isinstance(answer, ProfilingState):
            return answer
        if answer.phase is ProfilingPhase.FAILED:
            raise HTTPException(409, f"profiling {body.workload}: {answer.error}")
        response.status_code = 202
        return {"profiling": {"workload": body.workload, "started_at": answer.started_at}}

    @app.post("/simulations", status_code=202, response_model=SimulationView,
              summary="run `rightsize simulate` on a trace; poll GET /simulations/{id}")  # fmt: skip
    def simulate(body: SimulationRequest, owner_id: Owner) -> SimulationView:
        return simulations.start(body, owner_id)

    @app.get("/simulations", response_model=list[SimulationView], summary="your simulations")
    def simulations_list(owner_id: Owner) -> list[SimulationView]:
        simulations.refresh()
        return store.simulations(owner_id)

    def own_simulation(simulation_id: int, owner_id: int) -> SimulationView:
        simulations.refresh()
        found = store.simulation(simulation_id, owner_id)
        if found is None:
            raise HTTPException(404, f"no simulation {simulation_id}")
        return found

    @app.get("/simulations/{simulation_id}", response_model=SimulationView,
             summary="a simulation: running, or its per-policy results")  # fmt: skip
    def simulation(simulation_id: Annotated[int, Path(ge=1, le=2**62)],
                   owner_id: Owner) -> SimulationView:  # fmt: skip
        return own_simulation(simulation_id, owner_id)

    @app.get("/simulations/{simulation_id}/plots/{name}", summary="one of its plots (PNG)",
             response_class=FileResponse)  # fmt: skip
    def simulation_plot(simulation_id: Annotated[int, Path(ge=1, le=2**62)], name: str,
                        owner_id: Owner) -> FileResponse:  # fmt: skip
        found = simulations.plot(own_simulation(simulation_id, owner_id), name)
        if found is None:
            raise HTTPException(404, f"simulation {simulation_id} has no plot {name!r}")
        return FileResponse(found, media_type="image/png")

    @app.post("/studies", status_code=201, response_model=StudyView,
              summary="keep a `rightsize tune --json` report as a study")  # fmt: skip
    def add_study(body: StudyUpload, owner_id: Owner) -> StudyView:
        return store.add_study(owner_id, body.name, body.report.model_dump(mode="json"))

    @app.get("/studies", response_model=list[StudyView], summary="your studies")
    def studies(owner_id: Owner) -> list[StudyView]:
        return store.studies(owner_id)

    @app.get("/studies/{study_id}", response_model=StudyView,
             summary="a study with its brackets, rungs, packs and losses")  # fmt: skip
    def study(study_id: Annotated[int, Path(ge=1, le=2**62)], owner_id: Owner) -> StudyView:
        found = store.study(study_id, owner_id)
        if found is None:
            raise HTTPException(404, f"no study {study_id}")
        return found

    @app.post("/jobs", status_code=201, response_model=JobView, summary="submit a job")
    def submit(spec: JobSpec, owner_id: Owner) -> JobView:
        return allocator.submit(spec, owner_id)

    @app.get("/jobs", response_model=list[JobView], summary="your jobs, oldest first")
    def jobs(owner_id: Owner,
             phase: Annotated[list[JobPhase] | None, Query()] = None) -> list[JobView]:  # fmt: skip
        return store.jobs(owner_id, tuple(phase or ()))

    @app.get("/queue", response_model=list[QueueRow],
             summary="your jobs with their newest samples, oldest first")  # fmt: skip
    def queue(owner_id: Owner,
              phase: Annotated[list[JobPhase] | None, Query()] = None) -> list[QueueRow]:  # fmt: skip
        return store.queue(owner_id, tuple(phase or ()))

    @app.get("/queue/events", response_class=StreamingResponse,
             summary="your queue as it changes: server-sent `queue` events with GET /queue's "
                     "rows (service/live.py)")  # fmt: skip
    def queue_events(owner_id: Owner) -> StreamingResponse:
        return StreamingResponse(live.queue_stream(store, owner_id), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})  # fmt: skip

    @app.get("/jobs/{name}", response_model=JobDetail, summary="a job, its shapes, its last sample")
    def job(name: str, owner_id: Owner) -> JobDetail:
        view = own_job(name, owner_id)
        return JobDetail(job=view, shapes=store.shapes(view.id),
                         latest=store.latest_samples([view.id]).get(view.id))  # fmt: skip

    @app.get("/jobs/{name}/samples", response_model=list[SampleView],
             summary="a job's metric samples after a sequence number")  # fmt: skip
    def samples(name: str, owner_id: Owner,
                after: Annotated[int, Query(ge=0, le=2**62)] = 0) -> list[SampleView]:  # fmt: skip
        return store.samples(own_job(name, owner_id).id, after)

    @app.get("/jobs/{name}/events", response_class=StreamingResponse,
             summary="the job as it changes: server-sent events job, shape, sample and end "
                     "(service/live.py)")  # fmt: skip
    def events(name: str, owner_id: Owner,
               after: Annotated[int, Query(ge=0, le=2**62)] = 0) -> StreamingResponse:  # fmt: skip
        view = own_job(name, owner_id)
        return StreamingResponse(live.stream(store, view.id, after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})  # fmt: skip

    @app.get("/jobs/{name}/report", summary="a finished job's report")
    def report(name: str, owner_id: Owner) -> dict[str, Any]:
        found = store.report(own_job(name, owner_id).id)
        if found is None:
            raise HTTPException(404, f"job {name!r} has no report yet")
        return found

    @app.post("/jobs/{name}/cancel", response_model=JobView, summary="cancel a job")
    def cancel(name: str, owner_id: Owner) -> JobView:
        view = own_job(name, owner_id)
        if not JobPhase(view.phase).done:
            allocator.cancel(view.name)
        return store.job_by_id(view.id)

    web.mount(app)
    return app
