#!/usr/bin/env python3
"""clang's thread-safety analysis over the daemon's annotated classes (issue 36).

The build compiles with GCC; this re-runs, with clang++ -fsyntax-only -Wthread-safety
-Werror=thread-safety, the compile command (from the build's compile_commands.json) of every
daemon translation unit that includes an annotated header (one that reaches daemon/sync/
mutex.hpp, through any number of daemon headers), itself or through the header of its own name,
or that takes a MutexLock. First it compiles a snippet that breaks a NEXUS_GUARDED_BY rule and
requires clang to refuse it, so a clang that silently does no analysis fails the check too.

Exit status 0 when every unit is clean, 1 otherwise (clang's diagnostics printed), 77 (skipped)
when there is no clang++ or it cannot compile a plain annotated snippet here.
Usage: tools/check_thread_safety.py BUILD_DIR [--jobs N]
"""
import argparse
import concurrent.futures
import json
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]
CLEAN = """#include "daemon/sync/mutex.hpp"
struct Counter {
  nexus::Mutex mu;
  int n NEXUS_GUARDED_BY(mu) = 0;
  void bump() { nexus::MutexLock lk(mu); ++n; }
};
"""
BROKEN = """#include "daemon/sync/mutex.hpp"
struct Counter {
  nexus::Mutex mu;
  int n NEXUS_GUARDED_BY(mu) = 0;
  void bump() { ++n; }  // no lock held: the analysis must refuse this
};
"""


MUTEX = "daemon/sync/mutex.hpp"


def annotated_headers():
    """Daemon headers that reach mutex.hpp, directly or through another such header: a template
    (TrainingQueue) is only analysed where it is used, which may be a unit two includes away."""
    texts = {str(h.relative_to(ROOT)): h.read_text(errors="replace") for h in (ROOT / "daemon").rglob("*.hpp")}
    found, grew = {MUTEX}, True
    while grew:
        grew = False
        for name, text in texts.items():
            if name not in found and any(f'#include "{h}"' in text for h in found):
                found.add(name)
                grew = True
    return found


def uses_annotations(source, headers):
    """The unit includes an annotated header, itself or through the header of its own name."""
    texts = [source.read_text(errors="replace")]
    if source.with_suffix(".hpp").exists():
        texts.append(source.with_suffix(".hpp").read_text(errors="replace"))
    # A unit that locks an annotated mutex (MutexLock) but reaches its header only through
    # another one (engine_admission.cpp, say) is analysed too.
    return "MutexLock" in texts[0] or any(f'#include "{h}"' in t for t in texts for h in headers)


def clang_command(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [clang], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch") or a.endswith(".pch") or "cmake_pch" in a:
            continue
        if a == "-include" or a == "-Xclang":
            skip = True  # a precompiled header (GCC's cannot be read by clang)
            continue
        out.append(a)
    return out + FLAGS


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir", type=pathlib.Path)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    clang = shutil.which("clang++")
    if not clang:
        print("no clang++: the thread-safety analysis was not run", file=sys.stderr)
        return 77
    db = json.loads((args.build_dir / "compile_commands.json").read_text())
    headers = annotated_headers()
    files = {id(e): pathlib.Path(e["directory"], e["file"]).resolve() for e in db}  # a symlinked tree too
    units = [e for e in db if files[id(e)].is_relative_to(ROOT / "daemon")
             and files[id(e)].suffix == ".cpp" and uses_annotations(files[id(e)], headers)]
    if not units:
        print("no daemon unit uses daemon/sync/mutex.hpp: nothing to analyse", file=sys.stderr)
        return 1

    def snippet(text):
        with tempfile.NamedTemporaryFile("w", suffix=".cpp") as f:
            f.write(text)
            f.flush()
            return subprocess.run([clang, "-std=c++20", f"-I{ROOT}", f.name] + FLAGS, capture_output=True, text=True)

    plain = snippet(CLEAN)
    if plain.returncode != 0:
        print("clang++ cannot compile this project's C++20 with its standard library here; not analysed:\n"
              + plain.stderr, file=sys.stderr)
        return 77
    r = snippet(BROKEN)
    if r.returncode == 0 or "requires holding mutex" not in r.stderr:
        print("clang accepted an unguarded write: the analysis is not running\n" + r.stderr)
        return 1

    def analyse(entry):
        r = subprocess.run(clang_command(entry, clang), cwd=entry["directory"], capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for path, rc, err in pool.map(analyse, units):
            name = pathlib.Path(path).relative_to(ROOT)
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {name}", flush=True)
            if rc != 0:
                failed += 1
                if "-Wthread-safety" not in err:
                    print("  clang could not compile this unit (no thread-safety finding among its errors):")
                print(err)
    print(f"{len(units)} annotated units, {failed} with thread-safety errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
