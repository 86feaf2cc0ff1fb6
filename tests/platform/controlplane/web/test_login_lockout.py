"""django-axes on the UI login: repeated failures lock a username out from one address, with the
reason as a form error; the right password stays refused until the cool-off passes or an operator
runs `manage.py axes_reset_username`."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db
LOCKED = "Too many failed logins: this account is locked out from your address for 15 minutes."


@pytest.fixture
def lock_out(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    get_user_model().objects.create_user("ola", password="right-pw-123")

    def fail_until_locked():
        for _ in range(2):
            response = client.post("/login/", {"username": "ola", "password": "wrong"})
            assert response.status_code == 200
            assert "Please enter a correct username and password" in response.content.decode()
        response = client.post("/login/", {"username": "ola", "password": "wrong"})
        assert response.status_code == 429
        return response

    return fail_until_locked


def log_in(client, password="right-pw-123", address="127.0.0.1"):
    return client.post("/login/", {"username": "ola", "password": password}, REMOTE_ADDR=address)


def test_failed_logins_lock_out_with_a_form_error(client, lock_out):
    page = lock_out().content.decode()
    assert '<ul class="errorlist nonfield">' in page and LOCKED in page
    refused = log_in(client)
    assert refused.status_code == 429 and LOCKED in refused.content.decode()
    assert "_auth_user_id" not in client.session
    assert log_in(client, address="10.9.8.7").status_code == 302  # the lock is per username and address


def test_axes_reset_username_unlocks_at_once(client, lock_out):
    lock_out()
    call_command("axes_reset_username", "ola")
    response = log_in(client)
    assert response.status_code == 302 and response["Location"] == "/"


def test_the_lock_ends_after_the_cool_off(client, lock_out):
    from axes.models import AccessAttempt

    lock_out()
    assert log_in(client).status_code == 429
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16)
    )
    assert log_in(client).status_code == 302
