from controlplane.api.routing import router_urls
from controlplane.benchmarks.api import views

urlpatterns = router_urls(
    {
        "benchmark-runs": views.BenchmarkRunViewSet,
        "benchmark-schedules": views.BenchmarkScheduleViewSet,
    }
)
