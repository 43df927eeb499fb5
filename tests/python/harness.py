"""Test support for the Python client's tests: a real nexusd on a private socket, and checks
that fail the process (these run under CTest as plain scripts: no pytest in the venv offline).
Paths come from CTest's environment (tests/CMakeLists.txt)."""
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import nexus

NEXUSD = os.environ["NEXUS_TEST_NEXUSD"]
WEIGHTS = os.environ["NEXUS_TEST_WEIGHTS"]
SOURCE = os.environ["NEXUS_TEST_SOURCE_DIR"]

_failures = []

# A hang shows every thread's stack (then exits) well before CTest's timeout kills it silently.
faulthandler.dump_traceback_later(int(os.environ.get("NEXUS_TEST_HANG_S", "480")), exit=True)


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what, flush=True)
    if not condition:
        _failures.append(what)


def raises(error_class, call, what):
    try:
        call()
    except error_class as e:
        check(True, f"{what}: {type(e).__name__}: {e}")
        return e
    except Exception as e:  # the wrong kind of failure is a failure
        check(False, f"{what}: expected {error_class.__name__}, got {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: expected {error_class.__name__}, nothing was raised")
    return None


def finish():
    if _failures:
        print(f"{len(_failures)} check(s) failed: {_failures}", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)


class Daemon:
    """nexusd with the committed tiny backbone, in its own temp dir; stopped on exit."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="nexus-pytest-")
        self.socket = os.path.join(self.dir, "nexusd.sock")
        self.log = os.path.join(self.dir, "nexusd.log")
        argv = [NEXUSD, "--socket", self.socket, "--state-dir", os.path.join(self.dir, "state"),
                "--socket-mode", "666", "--weights", WEIGHTS, "--log-level", "warn", *extra]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                nexus.query_status(self.socket, timeout=0.5)
                return
            except nexus.Error:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError("nexusd did not come up:\n" + open(self.log).read())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if exc[0] is not None:
            print("nexusd log:\n" + open(self.log).read()[-4000:], flush=True)
        shutil.rmtree(self.dir, ignore_errors=True)
