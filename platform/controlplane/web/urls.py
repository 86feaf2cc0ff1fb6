from django.contrib.auth import views as auth_views
from django.urls import include, path

from controlplane.checkpoints import views as checkpoints
from controlplane.fleet import views as fleet
from controlplane.serving import views as serving

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="web/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("", fleet.fleet_overview, name="fleet"),
    path("checkpoints/", checkpoints.checkpoint_list, name="checkpoint-list"),
    path("checkpoints/rows/", checkpoints.checkpoint_rows, name="checkpoint-rows"),
    path("checkpoints/<int:pk>/", checkpoints.checkpoint_detail, name="checkpoint-detail"),
    path("checkpoints/<int:pk>/validate/", checkpoints.checkpoint_validate, name="checkpoint-validate"),
    path("deployments/", serving.deployment_list, name="deployment-list"),
    path("deployments/new/", serving.deployment_create, name="deployment-create"),
    path("deployments/<int:pk>/", serving.deployment_detail, name="deployment-detail"),
    path("deployments/<int:pk>/live/", serving.deployment_live, name="deployment-live"),
    path("deployments/<int:pk>/samples.json", serving.deployment_samples, name="deployment-samples"),
    path("deployments/<int:pk>/scale/", serving.deployment_scale, name="deployment-scale"),
    path("deployments/<int:pk>/revise/", serving.deployment_revise, name="deployment-revise"),
    path("deployments/<int:pk>/restart/", serving.deployment_restart, name="deployment-restart"),
    path(
        "deployments/<int:pk>/rollback/<int:number>/", serving.deployment_rollback, name="deployment-rollback"
    ),
    path(
        "deployments/<int:pk>/replicas/<int:replica_pk>/<str:verb>/",
        serving.replica_action,
        name="replica-action",
    ),
    path("benchmarks/", include("controlplane.benchmarks.urls")),
]
