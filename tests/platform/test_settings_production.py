"""With DEBUG off the settings refuse to run on a missing or development secret, and cookies go secure."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRINT_SETTINGS = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DEBUG, settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, settings.ALLOWED_HOSTS)"
)


def _settings(tmp_path, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"}}
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


def test_debug_off_with_a_real_key_has_secure_cookies_and_no_default_hosts(tmp_path):
    result = _settings(tmp_path, DEBUG="0", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "True", "[]"]


def test_secure_cookies_can_be_turned_off_explicitly(tmp_path):
    result = _settings(
        tmp_path, DEBUG="0", SECRET_KEY="x" * 50, SECURE_COOKIES="0", ALLOWED_HOSTS="cp.example"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "False", "['cp.example']"]


def test_a_malformed_boolean_is_a_clear_error(tmp_path):
    result = _settings(tmp_path, DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr
