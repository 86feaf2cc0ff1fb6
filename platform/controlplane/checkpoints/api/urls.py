from controlplane.api.routing import router_urls
from controlplane.checkpoints.api.views import CheckpointViewSet

urlpatterns = router_urls({"checkpoints": CheckpointViewSet})
