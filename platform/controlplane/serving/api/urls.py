from rest_framework.routers import SimpleRouter

from controlplane.serving.api import views

router = SimpleRouter()
router.register("deployments", views.DeploymentViewSet)
router.register("replicas", views.ReplicaViewSet)
router.register("replica-events", views.ReplicaEventViewSet)
router.register("metric-samples", views.MetricSampleViewSet)
urlpatterns = router.urls
