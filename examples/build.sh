#!/bin/sh
# build.sh - compiles examples with the very compile line written at the top of each, so the
# lines a reader copies are the lines that are tested.
#
#   sh examples/build.sh OUTDIR [EXAMPLE.c|EXAMPLE.cpp ...]    (default: every example)
#
# Each line "compile (from examples/):  cc ... -o NAME ..." runs in examples/, writing
# OUTDIR/NAME instead of NAME. CC and CXX, when set, replace the lines' cc and g++;
# EXTRA_FLAGS (e.g. "-Wall -Wextra -Wpedantic -Werror") is added to every line.
set -u
if [ $# -lt 1 ]; then
    echo "usage: sh examples/build.sh OUTDIR [EXAMPLE.c|EXAMPLE.cpp ...]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd)
shift
[ $# -gt 0 ] || set -- "$here"/*.c "$here"/*.cpp

status=0
for source in "$@"; do
    file=$(basename "$source")
    line=$(sed -n 's/^.*compile (from examples\/): *//p' "$here/$file" | head -n 1)
    if [ -z "$line" ]; then
        echo "build.sh: $file has no 'compile (from examples/):' line" >&2
        status=1
        continue
    fi
    # the output into OUTDIR; the compiler from CC / CXX when they are set
    line=$(printf '%s\n' "$line" | sed -e "s| -o \([A-Za-z0-9_.-]*\)| -o '$out/\1'|" \
        -e "s|^cc |${CC:-cc} |" -e "s|^g++ |${CXX:-g++} |")
    echo "$line ${EXTRA_FLAGS:-}"
    (cd "$here" && eval "$line ${EXTRA_FLAGS:-}") || status=1
done
exit $status
