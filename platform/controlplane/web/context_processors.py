from controlplane.api.roles import ADMIN, OPERATOR, has_role, role_of


def roles(request) -> dict:
    """Templates offer only the actions the user's role allows."""
    user = getattr(request, "user", None)
    return {
        "role": role_of(user),
        "can_operate": has_role(user, OPERATOR),
        "can_admin": has_role(user, ADMIN),
    }
