#!/usr/bin/env python3
"""No executable of the build tree looks for libraries in the directory it is started from.

    check_run_paths.py BUILD_DIR

Reads the DT_RUNPATH and DT_RPATH of every executable ELF file under BUILD_DIR (readelf -d)
and fails on an element that is empty or relative ("", ".", "lib"): glibc resolves those
against the current directory, so a library planted where a user starts the program would be
loaded (CMake once padded dist-train's build RUNPATH with ':' for its install-time edit;
tools/CMakeLists.txt links the installed tools with their install RUNPATH instead).
$ORIGIN-based elements are the program's own directory and fine.
"""
import os
import re
import subprocess
import sys


def executables(build):
    for folder, subfolders, files in os.walk(build):
        subfolders[:] = [s for s in subfolders if s not in ("CMakeFiles", "Testing", "_deps")]
        for name in files:
            path = os.path.join(folder, name)
            if not os.access(path, os.X_OK) or os.path.islink(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def search_paths(path):
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    for kind, value in re.findall(r"\((RUNPATH|RPATH)\)\s+Library r[a-z]*path: \[(.*)\]",
                                  dynamic):
        yield kind, value


def main():
    build = sys.argv[1]
    checked, failures = 0, []
    for path in executables(build):
        checked += 1
        for kind, value in search_paths(path):
            for element in value.split(":"):
                if not element.startswith("/") and not element.startswith("$ORIGIN"):
                    failures.append(f"{os.path.relpath(path, build)}: {kind} [{value}] has the "
                                    f"element '{element}', which glibc reads in the current "
                                    "directory")
    print(f"{checked} executables checked")
    for failure in failures:
        print("FAIL:", failure)
    if checked == 0:
        print(f"FAIL: no executable under {build}")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
