#!/usr/bin/env python3
"""clang's thread-safety analysis over the daemon's annotated classes (issue 36).

The build compiles with GCC; this re-runs, with clang++ -fsyntax-only -Wthread-safety
-Werror=thread-safety, the compile command (from the build's compile_commands.json) of every
daemon translation unit that includes an annotated header (one that includes
daemon/sync/mutex.hpp), itself or through the header of its own name, or that takes a MutexLock. First it compiles a snippet that breaks a NEXUS_GUARDED_BY rule and
requires clang to refuse it, so a clang that silently does no analysis fails the check too.

Exit status 0 when every unit is clean, 1 otherwise (clang's diagnostics printed), 77 when no
clang++ is installed.
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
BROKEN = """#include "daemon/sync/mutex.hpp"
struct Counter {
  nexus::Mutex mu;
  int n NEXUS_GUARDED_BY(mu) = 0;
  void bump() { ++n; }  // no lock held: the analysis must refuse this
};
"""


MUTEX = "daemon/sync/mutex.hpp"


def annotated_headers():
    """Daemon headers that include mutex.hpp: the classes that carry annotations."""
    return {str(h.relative_to(ROOT)) for h in (ROOT / "daemon").rglob("*.hpp")
            if f'#include "{MUTEX}"' in h.read_text(errors="replace")} | {MUTEX}


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
    units = [e for e in db if pathlib.Path(e["file"]).is_relative_to(ROOT / "daemon")
             and pathlib.Path(e["file"]).suffix == ".cpp" and uses_annotations(pathlib.Path(e["file"]), headers)]
    if not units:
        print("no daemon unit uses daemon/sync/mutex.hpp: nothing to analyse", file=sys.stderr)
        return 1

    with tempfile.NamedTemporaryFile("w", suffix=".cpp") as broken:
        broken.write(BROKEN)
        broken.flush()
        r = subprocess.run([clang, "-std=c++20", f"-I{ROOT}", broken.name] + FLAGS, capture_output=True, text=True)
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
                print(err)
    print(f"{len(units)} annotated units, {failed} with thread-safety errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
