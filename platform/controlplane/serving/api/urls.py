from controlplane.api.routing import router_urls
from controlplane.serving.api import views

urlpatterns = router_urls(
    {
        "deployments": views.DeploymentViewSet,
        "replicas": views.ReplicaViewSet,
        "replica-events": views.ReplicaEventViewSet,
        "metric-samples": views.MetricSampleViewSet,
    }
)
