"""The web pages (issue 20): static files the service serves itself at ``/ui/``.

No build step and nothing fetched from elsewhere: plain HTML, CSS and one JavaScript
module (``static/app.js``) over the same REST API the CLI uses, charts drawn as SVG
(``static/charts.js``). The pages hold no data of their own: without a token the API
answers 401 and the pages show only the sign-in form.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

PREFIX = "/ui"


def mount(app: FastAPI) -> None:
    """Serve the pages at ``/ui/`` and send ``/`` there."""
    static = resources.files(__name__).joinpath("static")
    app.mount(PREFIX, StaticFiles(directory=str(static), html=True), name="ui")

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/")
