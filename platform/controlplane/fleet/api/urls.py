from controlplane.api.routing import router_urls
from controlplane.fleet.api import views

urlpatterns = router_urls(
    {
        "clusters": views.ClusterViewSet,
        "scale-up-domains": views.ScaleUpDomainViewSet,
        "nodes": views.NodeViewSet,
        "accelerators": views.AcceleratorViewSet,
    }
)
