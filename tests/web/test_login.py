"""Signing in and out: the token goes in a form POST (never a URL), the session cookie is
HttpOnly + SameSite=Strict, pages need it, and cross-site form posts are refused."""

from __future__ import annotations

import httpx

from tests.support.browser import shot


def test_pages_redirect_to_login_and_sign_in_sets_a_strict_httponly_cookie(new_page, web_service) -> None:
    page = new_page(signed_in=False)
    page.goto(f"{web_service.base}/new")
    assert page.url.startswith(f"{web_service.base}/login?next=")
    shot(page, "login")

    page.fill("#token", "wrong-token")
    page.click("button[type=submit]")
    assert "not this server's API token" in page.locator("#login-error").inner_text()
    assert page.locator("#token").get_attribute("aria-invalid") == "true"

    # Keyboard only: the token field has focus, Enter submits.
    assert page.evaluate("() => document.activeElement.id") == "token"
    page.keyboard.type(web_service.token)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == f"{web_service.base}/new"  # back where we were going
    assert web_service.token not in page.url
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["rankzero_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert not cookies["rankzero_csrf"]["httpOnly"]  # the JS echoes it in X-CSRF-Token

    page.goto(f"{web_service.base}/")
    page.click("text=Sign out")
    page.wait_for_url(f"{web_service.base}/login")
    page.goto(f"{web_service.base}/")
    assert page.url.startswith(f"{web_service.base}/login")


def test_cross_site_login_and_logout_are_refused(web_service) -> None:
    with httpx.Client(base_url=web_service.base, follow_redirects=False) as client:
        forged = client.post("/login", data={"token": web_service.token}, headers={"Origin": "https://evil.example"})
        assert forged.status_code == 403
        assert "rankzero_session" not in forged.cookies
        forged = client.post("/login", data={"token": web_service.token}, headers={"Sec-Fetch-Site": "cross-site"})
        assert forged.status_code == 403
        ok = client.post(
            "/login",
            data={"token": web_service.token, "next": "//evil.example/x"},
            headers={"Origin": web_service.base},
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/"  # no open redirect
        assert "rankzero_session" in client.cookies
        # Signing out needs the page's CSRF token, so another site cannot sign you out either.
        assert client.post("/logout", data={"csrf": "nope"}, headers={"Origin": web_service.base}).status_code == 403
        # A cookie-authenticated API POST without X-CSRF-Token is refused by the API.
        assert client.post("/api/jobs", json={"name": "x", "max_steps": 1}).status_code == 403
        csrf = client.cookies["rankzero_csrf"]
        out = client.post("/logout", data={"csrf": csrf}, headers={"Origin": web_service.base})
        assert out.status_code == 303
