#!/bin/sh
# check.sh - runs every example and checks what it prints (make examples-check).
#
#   sh examples/check.sh [DIR]    DIR holds the built examples (default build/examples)
#
# The examples run in DIR (the files they write land there) and check their own results:
# each ends with "... ok" lines, or prints FAILED and exits 1. This script wants exit status 0,
# those lines, and a few numbers above what a model that learned nothing would reach.
set -u
dir=${1:-build/examples}
failed=0

# run NAME: runs DIR/NAME, its output into DIR/NAME.out; 0 when it ran and exited 0
run() {
    name=$1
    if [ ! -x "$dir/$name" ]; then
        echo "examples-check $name: $dir/$name is not built (make examples)"
        failed=1
        return 1
    fi
    start=$(date +%s)
    (cd "$dir" && "./$name") >"$dir/$name.out" 2>&1
    rc=$?
    seconds=$(($(date +%s) - start))
    if [ $rc -ne 0 ]; then
        echo "examples-check $name: FAILED (exit status $rc); its output:"
        sed 's/^/    /' "$dir/$name.out"
        failed=1
        return 1
    fi
    return 0
}

problems=""
# expect NAME TEXT: the output has a line containing TEXT
expect() {
    grep -F -q -- "$2" "$dir/$1.out" || problems="$problems
    no line with: $2"
}
# above NAME SED_PATTERN LIMIT: the number that SED_PATTERN (one \(group\)) picks from the
# output's last matching line is above LIMIT
above() {
    value=$(sed -n "s/$2/\1/p" "$dir/$1.out" | tail -n 1)
    if [ -z "$value" ] || ! awk -v v="$value" -v l="$3" 'BEGIN { exit !(v + 0 > l + 0) }'; then
        problems="$problems
    '$2' gave '$value', wanted above $3"
    fi
}
# below NAME SED_PATTERN LIMIT: the same, below LIMIT
below() {
    value=$(sed -n "s/$2/\1/p" "$dir/$1.out" | tail -n 1)
    if [ -z "$value" ] || ! awk -v v="$value" -v l="$3" 'BEGIN { exit !(v + 0 < l + 0) }'; then
        problems="$problems
    '$2' gave '$value', wanted below $3"
    fi
}
# verdict NAME: reports the checks made since run NAME
verdict() {
    if [ -n "$problems" ]; then
        echo "examples-check $1: FAILED$problems"
        echo "  its output:"
        sed 's/^/    /' "$dir/$1.out"
        failed=1
    else
        printf 'examples-check %-22s ok (%s s)\n' "$1" "$seconds"
    fi
    problems=""
}

if run train_file; then
    expect train_file "loaded back: identical predictions: ok"
    above train_file '^validation: .*AUC \([0-9.]*\).*' 0.75
    below train_file '^kept the best epoch: \([0-9]*\).*' 50 # early stopping stopped it
    verdict train_file
fi

if run csr_toy; then
    expect csr_toy "every pairwise model beats the linear one by more than 0.1 AUC: ok"
    above csr_toy '^FM *test AUC \([0-9.]*\).*' 0.75
    below csr_toy '^linear *test AUC \([0-9.]*\).*' 0.6
    verdict csr_toy
fi

if run multiclass_regression; then
    expect multiclass_regression "multiclass accuracy above 0.8: ok"
    expect multiclass_regression "regression RMSE below half the mean predictor's: ok"
    verdict multiclass_regression
fi

if run resume_stream; then
    expect resume_stream "equal 6 epochs in one go, bit for bit: ok"
    expect resume_stream "chunks equal one pass over all 6000 rows, bit for bit: ok"
    above resume_stream '^stream: chunk 6 .*AUC \([0-9.]*\).*' 0.8
    verdict resume_stream
fi

if run serve_threads; then
    expect serve_threads "32000 requests answered, 0 failed, 0 answers differ"
    expect serve_threads "every thread got the same answers: ok"
    verdict serve_threads
fi

if run gpu; then
    # without a GPU it says why; with one it names the device and checks the resident model
    if grep -q '^no GPU: ' "$dir/gpu.out"; then
        expect gpu "trained FFM on the CPU"
        expect gpu "the CPU did the work: ok"
    else
        expect gpu "GPU: "
        expect gpu "trained FFM on the GPU"
        expect gpu "resident GPU predictions agree with the CPU's"
    fi
    above gpu '^backend AUTO.*test AUC \([0-9.]*\).*' 0.75
    verdict gpu
fi

if run cpp_wrapper; then
    expect cpp_wrapper "saved, loaded back, same predictions: ok"
    expect cpp_wrapper "errors arrive as exceptions: ok"
    above cpp_wrapper '^FFM on .*test AUC \([0-9.]*\).*' 0.75
    verdict cpp_wrapper
fi

if [ $failed -ne 0 ]; then
    echo "examples-check: FAILED"
    exit 1
fi
echo "examples-check: every example ran and printed what it should"
