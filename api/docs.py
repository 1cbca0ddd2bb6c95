"""The interactive API page (/docs): Swagger UI served from this origin, never from a CDN.

FastAPI's default /docs pulls swagger-ui's JavaScript from a CDN into the dashboard's origin, where
the session cookie lives; a compromised CDN (or its absence offline) would own or break it. Here the
assets are the pinned npm package `swagger-ui-dist` (web/package.json), copied by `make web` into
web/static/vendor/swagger-ui/, and the page carries a Content-Security-Policy allowing only
same-origin scripts (the initialiser is a file too, not an inline script). Without the assets /docs
says how to get them; /openapi.json always works.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

VENDOR = Path(__file__).resolve().parent.parent / "web" / "static" / "vendor" / "swagger-ui"
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css")

# Swagger UI sets element styles from JS (allowed by the CSSOM) and inlines a few SVG data: images.
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rankzero API</title>
<link rel="stylesheet" href="/static/vendor/swagger-ui/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/static/vendor/swagger-ui/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"""

INIT_JS = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  presets: [SwaggerUIBundle.presets.apis],
});
"""

MISSING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rankzero API</title></head>
<body><p>The interactive API page needs its local assets: run <code>make web</code>.
The OpenAPI schema is at <a href="/openapi.json">/openapi.json</a>; the reference is docs/api.md.</p></body></html>
"""

router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
def docs_page() -> HTMLResponse:
    present = all((VENDOR / name).is_file() for name in ASSETS)
    return HTMLResponse(PAGE if present else MISSING, status_code=200 if present else 503, headers=SECURITY_HEADERS)


@router.get("/docs/init.js")
def docs_init() -> Response:
    return Response(INIT_JS, media_type="text/javascript", headers=SECURITY_HEADERS)
