from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from controlplane.api.roles import VIEWER, has_role


def role_required(role: str = VIEWER):
    """Logged in, and holding at least ``role``; otherwise 403 (the UI does not offer it anyway)."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"needs the {role} role")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate
