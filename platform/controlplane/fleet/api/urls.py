from rest_framework.routers import SimpleRouter

from controlplane.fleet.api import views

router = SimpleRouter()
router.register("clusters", views.ClusterViewSet)
router.register("scale-up-domains", views.ScaleUpDomainViewSet)
router.register("nodes", views.NodeViewSet)
router.register("accelerators", views.AcceleratorViewSet)
urlpatterns = router.urls
