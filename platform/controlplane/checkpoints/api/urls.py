from rest_framework.routers import SimpleRouter

from controlplane.checkpoints.api.views import CheckpointViewSet

router = SimpleRouter()
router.register("checkpoints", CheckpointViewSet)
urlpatterns = router.urls
