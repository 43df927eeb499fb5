#!/usr/bin/env python3
"""The daemon's layering, checked from its #include lines (issue 36).

A request enters at ipc (the front door) and goes down: ipc -> master -> model | env | rl. ipc
hands requests to the services through interfaces it owns (ServicePort) and never includes them,
so nothing in a service can reach back into a tenant's segment or the reactor. Checked:

  1. no #include from daemon/ipc/ into daemon/{master,jobs,model,env,rl}/;
  2. no cycle between daemon folders (a folder is daemon/<name>/, its subfolders included);
  3. the services (jobs, model, env, rl) include no FlatBuffers header: they take typed requests,
     and the tenants' wire is ipc's and master's. (env's protocol with simulator processes,
     schema/ext_frame.hpp, is its own and not counted.)

  4. a .cpp and its .hpp (one unit: a class and its implementation) are under 400 lines
     together. Each file's own size is tests/file_size_test.cmake's rule
     (unit.source_files_under_400_lines), for every source of the project.

Exit status 0 when all hold, 1 otherwise, with each violation on its own line.
Usage: tools/check_layers.py [--root DIR]
"""
import argparse
import pathlib
import re
import sys

SERVICES_BELOW_IPC = {"master", "jobs", "model", "env", "rl"}
MAX_LINES = 400
INCLUDE = re.compile(r'^\s*#\s*include\s+"daemon/([a-z_]+)/')
WIRE = re.compile(r'^\s*#\s*include\s+[<"](flatbuffers/|nexus/wire/|[a-z_]+_generated\.h)')


def folder_of(path, daemon):
    parts = path.relative_to(daemon).parts
    return parts[0] if len(parts) > 1 else None  # daemon/main.cpp belongs to no folder


def find_cycle(graph):
    """One cycle of folders as a list (first == last), or None. Depth-first with colours."""
    colour, stack = {}, []

    def visit(node):
        colour[node] = "grey"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == "grey":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in colour:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = "black"
        return None

    for node in sorted(graph):
        if node not in colour:
            found = visit(node)
            if found:
                return found
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent, type=pathlib.Path)
    args = ap.parse_args()
    daemon = args.root / "daemon"
    sources = sorted(p for p in daemon.rglob("*") if p.suffix in {".cpp", ".hpp", ".cu", ".h"})
    if not sources:
        print(f"no daemon sources under {daemon}", file=sys.stderr)
        return 1

    problems, graph, lines = [], {}, {}
    for path in sources:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        lines[path] = len(text)
        here = folder_of(path, daemon)
        for number, line in enumerate(text, 1):
            if here in SERVICES_BELOW_IPC - {"master"} and WIRE.match(line):
                problems.append(f"{path.relative_to(args.root)}:{number}: the {here} service includes a FlatBuffers "
                                "header (services take typed requests; decoding is ipc's and master's)")
            m = INCLUDE.match(line)
            if not m or here is None or m.group(1) == here:
                continue
            graph.setdefault(here, set()).add(m.group(1))
            if here == "ipc" and m.group(1) in SERVICES_BELOW_IPC:
                problems.append(f"{path.relative_to(args.root)}:{number}: ipc includes daemon/{m.group(1)}/ "
                                "(the front door must not depend on the services it serves)")

    cycle = find_cycle(graph)
    if cycle:
        problems.append("cycle between daemon folders: " + " -> ".join(cycle))

    for path in sources:
        if path.suffix == ".cpp" and path.with_suffix(".hpp") in lines:
            total = lines[path] + lines[path.with_suffix(".hpp")]
            if total >= MAX_LINES:
                problems.append(f"{path.relative_to(args.root)} and its .hpp are {total} lines together "
                                f"(a unit stays under {MAX_LINES}: split it by what its parts do)")

    print("daemon folders and what they include:")
    for folder in sorted(set(graph) | {f for deps in graph.values() for f in deps}):
        print(f"  {folder:8} -> {', '.join(sorted(graph.get(folder, ()))) or '-'}")
    for p in problems:
        print("LAYERS: " + p)
    print(f"{len(sources)} daemon sources: " + ("layering holds" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
