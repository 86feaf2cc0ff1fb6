from rest_framework.permissions import SAFE_METHODS, BasePermission

from controlplane.api.roles import ADMIN, VIEWER, has_role


class RolePermission(BasePermission):
    """Reads need the view's ``read_role`` (viewer by default), writes its ``write_role``."""

    message = "Your role does not allow this action."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return has_role(request.user, getattr(view, "read_role", VIEWER))
        return has_role(request.user, getattr(view, "write_role", ADMIN))
