"""pytest plugin: mark selected third-party tests with ``compile_cache``, unchanged otherwise.

Loaded through ``PYTEST_PLUGINS=thirdparty_mark`` (with this directory on ``PYTHONPATH``),
so that the plugin's own phase processes, which are fresh pytest runs over the same node
id, load it too. ``THIRDPARTY_MARK`` lists the node ids to mark, separated by spaces;
a node id matches exactly, or by its part after the file path (``Class::test[param]``).
"""

import os

import pytest


def _wanted():
    return [w for w in os.environ.get("THIRDPARTY_MARK", "").split() if w]


def _matches(nodeid, wanted):
    tail = nodeid.split("::", 1)[-1]
    for w in wanted:
        if nodeid == w or nodeid.endswith("/" + w) or w.endswith("/" + nodeid):
            return True
        if tail == w.split("::", 1)[-1]:
            return True
    return False


def pytest_configure(config):
    config.addinivalue_line("markers", "compile_cache: added by benchmarks/third_party/thirdparty_mark.py")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    wanted = _wanted()
    for item in items:
        if _matches(item.nodeid, wanted):
            item.add_marker(pytest.mark.compile_cache)
