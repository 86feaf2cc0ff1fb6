"""Helpers shared by the test suites: ``from tests.support.ports import free_port`` and so on."""
