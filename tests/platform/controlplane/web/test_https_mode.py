"""Logging in through the UI with CSRF checks on, over plain HTTP (the default settings) and behind an
HTTPS proxy (what SERVED_OVER_HTTPS turns on, tests/platform/test_settings_production.py)."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


def log_in(client: Client, **https) -> tuple:
    get_user_model().objects.create_user("ola", password="right-pw-123")
    page = client.get("/login/", **https)
    token = page.cookies["csrftoken"]
    response = client.post(
        "/login/",
        {"username": "ola", "password": "right-pw-123", "csrfmiddlewaretoken": token.value},
        **https,
    )
    return page, token, response


def test_plain_http_login_works_with_cookies_a_browser_sends_back():
    page, token, response = log_in(Client(enforce_csrf_checks=True))
    assert response.status_code == 302 and response["Location"] == "/"
    assert not token["secure"] and not response.cookies["sessionid"]["secure"]
    assert "Strict-Transport-Security" not in page


def test_behind_an_https_proxy_cookies_are_secure_and_hsts_is_sent(settings):
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    https = {
        "HTTP_X_FORWARDED_PROTO": "https",
        "HTTP_HOST": "testserver",
        "HTTP_REFERER": "https://testserver/login/",
    }
    page, token, response = log_in(Client(enforce_csrf_checks=True), **https)
    assert response.status_code == 302 and response["Location"] == "/"
    assert token["secure"] and response.cookies["sessionid"]["secure"]
    assert page["Strict-Transport-Security"] == "max-age=31536000"
