"""The suite's shared fixtures live in tests/support (see its __init__ for the map); loaded here for every folder."""

pytest_plugins = [
    "tests.support.databases",
    "tests.support.settings",
    "tests.support.services",
    "tests.support.servers",
    "tests.support.browser",
]
