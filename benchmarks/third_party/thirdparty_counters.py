"""pytest plugin for the plain pair: at session end, write what this process saw to a JSON file.

``THIRDPARTY_COUNTERS`` names the file. It gets each test's outcome and
``torch._dynamo.utils.counters["inductor"]`` (fxgraph_cache_hit/miss/bypass, ...) and
``counters["aot_autograd"]`` of the whole session.
"""

import json
import os


_outcomes = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        prev = _outcomes.get(report.nodeid)
        if prev in (None, "passed"):
            _outcomes[report.nodeid] = report.outcome if report.when == "call" else (
                "error" if report.outcome == "failed" else report.outcome)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("THIRDPARTY_COUNTERS")
    if not path:
        return
    data = {"exitstatus": int(exitstatus), "outcomes": _outcomes}
    try:
        from torch._dynamo.utils import counters

        data["inductor"] = dict(counters["inductor"])
        data["aot_autograd"] = dict(counters["aot_autograd"])
    except Exception as e:  # torch not imported or too old
        data["counters_error"] = repr(e)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
