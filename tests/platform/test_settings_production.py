"""With DEBUG off the settings refuse to run on a missing or development secret; cookies go secure and
HSTS comes on when the site is served over HTTPS, and only then."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRINT_SETTINGS = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DEBUG, settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, settings.ALLOWED_HOSTS, "
    "settings.SECURE_HSTS_SECONDS, getattr(settings, 'SECURE_PROXY_SSL_HEADER', None))"
)


def _settings(tmp_path, **env) -> subprocess.CompletedProcess:
    ours = {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "SERVED_OVER_HTTPS", "SECURE_COOKIES", "SECURE_HSTS_SECONDS",
            "BEHIND_TLS_PROXY"}  # fmt: skip
    base = {k: v for k, v in os.environ.items() if k not in ours}
    return subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS],
        cwd=REPO,
        env={**base, "DJANGO_SETTINGS_MODULE": "controlplane.settings", "PYTHONPATH": "platform",
             "CHASSIS_VAR_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip


def test_debug_off_without_secret_key_refuses_to_start(tmp_path):
    result = _settings(tmp_path, DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_debug_off_refuses_the_development_key(tmp_path):
    result = _settings(tmp_path, DEBUG="0", SECRET_KEY="chassis-embedded-development-key-not-for-production")
    assert result.returncode != 0
    assert "development key" in result.stderr


def test_debug_off_over_plain_http_keeps_cookies_a_browser_sends_back(tmp_path):
    result = _settings(tmp_path, DEBUG="0", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "False", "[]", "0", "None"]


def test_served_over_https_has_secure_cookies_hsts_and_trusts_the_proxy(tmp_path):
    result = _settings(tmp_path, DEBUG="0", SECRET_KEY="x" * 50, SERVED_OVER_HTTPS="1", ALLOWED_HOSTS="cp.example")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().split(maxsplit=5) == [
        "False", "True", "True", "['cp.example']", "31536000", "('HTTP_X_FORWARDED_PROTO', 'https')"
    ]  # fmt: skip


def test_https_parts_can_be_turned_off_one_by_one(tmp_path):
    result = _settings(
        tmp_path, DEBUG="0", SECRET_KEY="x" * 50, SERVED_OVER_HTTPS="1", SECURE_COOKIES="0",
        SECURE_HSTS_SECONDS="0", BEHIND_TLS_PROXY="0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "False", "[]", "0", "None"]


def test_a_malformed_boolean_is_a_clear_error(tmp_path):
    result = _settings(tmp_path, DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr
