from django.http import JsonResponse
from django.views.decorators.http import require_GET

from controlplane.telemetry.health import check_broker, check_database


@require_GET
def health(request):
    """200 when the database and the broker are both reachable, 503 otherwise; JSON either way."""
    database, broker = check_database(), check_broker()
    ok = database.reachable and broker.reachable
    body = {"status": "ok" if ok else "degraded", "database": database.as_dict(), "broker": broker.as_dict()}
    return JsonResponse(body, status=200 if ok else 503)
