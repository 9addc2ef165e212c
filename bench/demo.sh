#!/bin/sh
# demo.sh - `make demo`: a linear model, FM, FFM and FwFM trained and compared through the mfm tool.
#
# build/demo-data (bench/demo.c) writes planted-interaction click data as libffm text; each model
# is trained with `mfm train` (validation metrics after every epoch) and scored on the held-out
# test rows with `mfm eval`. Run from the repository root after `make build/demo-data build/mfm`.
set -eu

mfm=build/mfm
dir=build/demo
mkdir -p "$dir"
build/demo-data "$dir"

# name:options that make the model; everything else is the library's defaults (AdaGrad, its
# learning rate and k, epochs until the validation rows stop improving), as a user meets them
models="linear:--model linear
FM:--model fm
FFM:--model ffm
FwFM:--model fwfm"

printf '%-8s %13s %9s %9s %13s\n' model "test logloss" "test AUC" "train s" "train rows/s" > "$dir/table.txt"
while IFS=: read -r name opts; do
    echo
    echo "== $name: mfm train $opts"
    # --features/--fields: test rows may hold ids that the training rows never use
    # shellcheck disable=SC2086 # $opts is a list of options
    $mfm train $opts --seed 1 --features 1000 --fields 20 \
        -p "$dir/valid.ffm" "$dir/train.ffm" "$dir/$name.model" | tee "$dir/$name.log"
    grep -q '^trained ' "$dir/$name.log" || { echo "demo: training $name failed" >&2; exit 1; }
    $mfm eval "$dir/$name.model" "$dir/test.ffm" > "$dir/$name.eval"
    # "trained M in 1.23 s (81234 rows/s)" and "logloss X  auc Y  accuracy Z  rows N  seconds S"
    awk -v name="$name" '/^trained /{ s = $4; r = substr($6, 2) } /^logloss /{ l = $2; a = $4 }
        END { printf "%-8s %13.4f %9.4f %9.2f %13.0f\n", name, l, a, s, r }' \
        "$dir/$name.log" "$dir/$name.eval" >> "$dir/table.txt"
done <<EOF
$models
EOF
echo
cat "$dir/table.txt"
