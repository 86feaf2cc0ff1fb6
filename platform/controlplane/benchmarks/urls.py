"""Operator UI routes under /benchmarks/ (included by the web URL conf)."""

from django.urls import path

from controlplane.benchmarks import views

urlpatterns = [
    path("", views.run_list, name="benchmark-run-list"),
    path("new/", views.run_create, name="benchmark-run-create"),
    path("<int:pk>/", views.run_detail, name="benchmark-run-detail"),
    path("<int:pk>/live/", views.run_live, name="benchmark-run-live"),
    path("<int:pk>/samples.json", views.run_samples, name="benchmark-run-samples"),
    path("<int:pk>/cancel/", views.run_cancel, name="benchmark-run-cancel"),
    path("<int:pk>/reproduce/", views.run_reproduce, name="benchmark-run-reproduce"),
    path("<int:pk>/sweep.json", views.run_sweep, name="benchmark-run-sweep"),
    path("schedules/", views.schedule_list, name="benchmark-schedule-list"),
    path("schedules/new/", views.schedule_create, name="benchmark-schedule-create"),
    path("schedules/<int:pk>/", views.schedule_detail, name="benchmark-schedule-detail"),
    path("schedules/<int:pk>/trend.json", views.schedule_trend, name="benchmark-schedule-trend"),
    path("schedules/<int:pk>/toggle/", views.schedule_toggle, name="benchmark-schedule-toggle"),
]
