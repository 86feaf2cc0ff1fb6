"""Routes of the operator UI's list pages for accounts, audit, nodes and replicas, and deletes."""

from django.urls import path

from controlplane.web.pages import accounts, audit, deletion, nodes, replicas

urlpatterns = [
    path("users/", accounts.user_list, name="user-list"),
    path("users/<int:pk>/", accounts.user_edit, name="user-edit"),
    path("users/<int:pk>/delete/", deletion.user_delete, name="user-delete"),
    path("tokens/", accounts.token_list, name="token-list"),
    path("tokens/<int:pk>/revoke/", accounts.token_revoke, name="token-revoke"),
    path("audit/", audit.audit_list, name="audit-list"),
    path("nodes/", nodes.node_list, name="node-list"),
    path("nodes/<int:pk>/delete/", deletion.node_delete, name="node-delete"),
    path("nodes/<int:pk>/<str:verb>/", nodes.node_action, name="node-action"),
    path("replicas/", replicas.replica_list, name="replica-list"),
    path("replicas/<int:pk>/", replicas.replica_detail, name="replica-detail"),
    path("replicas/<int:pk>/log/", replicas.replica_log, name="replica-log"),
    path("events/", replicas.event_list, name="event-list"),
    path("checkpoints/<int:pk>/delete/", deletion.checkpoint_delete, name="checkpoint-delete"),
    path("deployments/<int:pk>/delete/", deletion.deployment_delete, name="deployment-delete"),
]
