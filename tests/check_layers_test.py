#!/usr/bin/env python3
"""tools/check_layers.py fails on what it must catch: an include from ipc into a service, a
cycle between daemon folders, a FlatBuffers header in a service, a .cpp and .hpp of 400 lines or
more together; and passes a tree without
them."""
import pathlib
import subprocess
import sys
import tempfile

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "check_layers.py"


def run(files):
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            path = pathlib.Path(root, "daemon", name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        r = subprocess.run([sys.executable, str(TOOL), "--root", root], capture_output=True, text=True)
        return r.returncode, r.stdout


clean = {
    "ipc/reactor.cpp": '#include "daemon/ipc/reactor.hpp"\n#include "daemon/metrics/service_status.hpp"\n',
    "master/master.cpp": '#include "daemon/ipc/service_port.hpp"\n#include "daemon/model/replica.hpp"\n',
    "model/replica.cpp": '#include "daemon/sched/queue.hpp"\n',
    "metrics/service_status.hpp": "#pragma once\n",
}
rc, out = run(clean)
assert rc == 0, out

rc, out = run({**clean, "ipc/status.cpp": '#include "daemon/master/jobs.hpp"\n'})
assert rc == 1 and "ipc includes daemon/master/" in out and "ipc/status.cpp:1" in out, out

rc, out = run({**clean, "model/slot.cpp": '#include "daemon/master/master.hpp"\n'})
assert rc == 1 and "cycle between daemon folders" in out and "master -> model -> master" in out, out

rc, out = run({**clean, "jobs/job_registry.hpp": '#include "nexus/wire/nexus_generated.h"\n'})
assert rc == 1 and "the jobs service includes a FlatBuffers header" in out, out

rc, out = run({**clean, "master/routes.cpp": '#include <flatbuffers/flatbuffers.h>\n'})
assert rc == 0, out  # master decodes the wire

big = "int x;\n" * 250
rc, out = run({**clean, "model/slot.cpp": big, "model/slot.hpp": "#pragma once\n" + big})
assert rc == 1 and "model/slot.cpp and its .hpp are 501 lines together" in out, out

rc, out = run({**clean, "model/slot.cpp": big, "model/other.hpp": big})
assert rc == 0, out  # files of different units are not added up

print("check_layers catches an ipc -> service include, a folder cycle, the wire in a service and a "
      ".cpp/.hpp unit of 400 lines or more")
