#!/usr/bin/env python3
"""Every Catch test's name must survive CTest: catch_discover_tests registers each name as a
CMake list element, so a ';' splits one test into several names that match nothing, and each of
those "passes" in 0.01 s having run no test (found: nine tests, among them the adapter service
test, had not run under CTest). Usage: test_names_check.py SOURCE_DIR."""
import pathlib
import re
import sys

TEST_CASE = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')

bad = []
for path in sorted(pathlib.Path(sys.argv[1], "tests").rglob("*.cpp")):
    for m in TEST_CASE.finditer(path.read_text(errors="replace")):
        name = "".join(LITERAL.findall(m.group(1)))
        if ";" in name:
            bad.append(f"{path}: {name!r}")
if bad:
    print("test names with ';' (CTest would split them and run nothing):", *bad, sep="\n  ")
    sys.exit(1)
print("all test names are single CTest names")
