"""Shared pytest setup: plugins that provide servers to the tests (each registers its fixtures)."""

pytest_plugins = [
    "tests.cluster.fixture",
]
