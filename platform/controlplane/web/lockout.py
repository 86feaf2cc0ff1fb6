"""What a locked-out login gets (django-axes' AXES_LOCKOUT_CALLABLE): the login form again, with
the reason as its error, and 429."""

from __future__ import annotations

from axes.helpers import get_cool_off
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import render


def locked_out(request, original_response=None, credentials=None):
    cool_off = get_cool_off(request)
    how_long = f"for {max(1, round(cool_off.total_seconds() / 60))} minutes" if cool_off else "until unlocked"
    form = AuthenticationForm(request, initial={"username": (credentials or {}).get("username", "")})
    locked_out = (
        f"Too many failed logins: this account is locked out from your address {how_long}. "
        "An administrator can unlock it sooner."
    )
    return render(request, "web/login.html", {"form": form, "locked_out": locked_out}, status=429)
