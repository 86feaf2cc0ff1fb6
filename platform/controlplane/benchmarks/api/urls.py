from rest_framework.routers import SimpleRouter

from controlplane.benchmarks.api import views

router = SimpleRouter()
router.register("benchmark-runs", views.BenchmarkRunViewSet)
router.register("benchmark-schedules", views.BenchmarkScheduleViewSet)
urlpatterns = router.urls
