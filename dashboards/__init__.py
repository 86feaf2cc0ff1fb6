"""Grafana dashboards as code, their provisioning, and Prometheus target discovery for Chassis."""
