#!/bin/sh
# defaults.sh OUTDIR [PARTS] - the larger runs of the defaults experiment (docs/DEFAULTS.md) on
# a machine with 16 or more cores: build/bench-defaults processes side by side, one thread each
# (two for the batch-4096 runs on 10^6 rows), each cut off after LIMIT seconds (490) so that the
# whole takes under nine minutes; a cut-off run leaves the lines it finished. PARTS picks parts
# by letter (default "ABCDEF"; G and H, the GPU's runs, one after another, need a CUDA device).
# A-G ran before rows were normalized by default and take the values as given (--no-normalize);
# N and H are the runs behind that default. All tables end up in OUTDIR/all.txt, one section per
# process.
set -u
out=${1:?usage: defaults.sh OUTDIR [PARTS]}
parts=${2:-ABCDEF}
limit=${LIMIT:-490}
bin=./build/bench-defaults
mkdir -p "$out/parts"
pids=""
job() { # job NAME ARGS... (several runs of one job: separate them with ';' inside sh -c)
    name=$1
    shift
    case "$parts" in *"${name%%_*}"*) ;; *) return ;; esac
    timeout "$limit" sh -c "$*" >"$out/parts/$name.txt" 2>&1 &
    pids="$pids $!"
}
B="$bin --no-normalize"
R5="--rows 1e5 --features 1e6"
R6="--rows 1e6 --features 1e6 --epochs 12"
# A. the coarse grid on the 10^5-row Criteo shape (10^6 features, Zipf 1.1, signal 1)
job A_ffm4 "$B $R5 --models ffm --k 4"
job A_ffm8a "$B $R5 --models ffm --k 8 --init 0,0.1"
job A_ffm8b "$B $R5 --models ffm --k 8 --init 1"
job A_fm "$B $R5 --models fm"
job A_fwfm "$B $R5 --models fwfm"
# B. other shapes at 10^5 rows: 10^4 and 10^6 features, Zipf 0.9 and 1.3, signal 1 and 3
GB="--rows 1e5 --features 1e4,1e6 --signal 1,3 --k 4 --init 0.1,1 --lr 0.02,0.05,0.1,0.2 --l2 2e-5"
job B_ffm09 "$B $GB --zipf 0.9 --models ffm"
job B_ffm13 "$B $GB --zipf 1.3 --models ffm"
job B_fm "$B $GB --zipf 0.9,1.3 --models fm"
job B_fwfm "$B $GB --zipf 0.9,1.3 --models fwfm"
# C. 10^7 features
job C_ffm "$B --rows 1e5 --features 1e7 --models ffm --k 4 --init 0,1 --lr 0.05,0.1 --l2 2e-5"
job C_fm "$B --rows 1e5 --features 1e7 --models fm,fwfm --k 4 --init 0,1 --lr 0.02,0.05,0.1 --l2 2e-5"
# D. 10^6 rows (the issue's large case); batch 4096 as the GPU would run it
job D_ffm1 "$B $R6 --models ffm --k 4 --init 1 --lr 0.05,0.1 --l2 2e-5"
job D_ffm2 "$B $R6 --models ffm --k 4 --init 1 --lr 0.2 --l2 2e-5; $B $R6 --models ffm --k 8 --init 0 --lr 0.05 --l2 0"
job D_fm "$B $R6 --models fm,fwfm --k 4 --init 1 --lr 0.02,0.05 --l2 2e-5; $B $R6 --models fm,fwfm --k 8 --init 0 --lr 0.05 --l2 0"
job D_b4096 "$B $R6 --epochs 10 --threads 2 --models ffm --k 4 --init 1 --lr 0.05 --l2 2e-5 --batch 4096 --rule none"
job D_b4096mean "$B $R6 --epochs 10 --threads 2 --models ffm --k 4 --init 1 --lr 0.05 --l2 2e-5 --batch 4096 --rule mean,sqrt"
job D_b4096fm "$B $R6 --epochs 10 --threads 2 --models fm,fwfm --k 4 --init 1 --lr 0.05 --l2 2e-5 --batch 4096 --rule none"
# E. batch size and learning-rate rule at 10^5 rows
GE="$R5 --k 4 --init 1 --lr 0.05 --l2 2e-5 --rule none,mean,sqrt"
job E_ffm256 "$B $GE --models ffm --batch 256"
job E_ffm4096 "$B $GE --models ffm --batch 4096"
job E_fm "$B $GE --models fm --batch 1,256,4096"
job E_fwfm "$B $GE --models fwfm --batch 1,256,4096"
job E_lr "$B $R5 --k 4 --init 1 --lr 0.1,0.2 --l2 2e-5 --models ffm,fm,fwfm --batch 4096"
# G. the GPU at batch 4096 (the library's rule), 10^5 and 10^6 rows, one process after another
job G_gpu "$B $R5 --backend cuda --models ffm,fm,fwfm --k 4 --init 1 --lr 0.05 --l2 2e-5 --batch 4096; $B $R6 --backend cuda --models ffm,fm,fwfm --k 4 --init 1 --lr 0.05 --l2 2e-5 --batch 4096"
# F. FFM's init_scale (0 = the library's 0.01)
job F_ffm "$B $R5 --models ffm --k 4 --init 1 --lr 0.05,0.1 --l2 2e-5 --init-scale 0.001,0.1,0.3,1"
# N. rows normalized (the library's default since): learning rate and init_scale per model on
# the Criteo shape (C5, C6), an interaction-heavy (I5) and a flat (F5) shape
N="$bin --normalize --k 4 --init 1 --l2 2e-5"
C5="--rows 1e5 --features 1e6 --zipf 1.1 --signal 1"
I5="--rows 1e5 --features 1e4 --zipf 1.3 --signal 3"
F5="--rows 1e5 --features 1e6 --zipf 0.9 --signal 3"
C6="--rows 1e6 --features 1e6 --zipf 1.1 --signal 1 --epochs 20"
job N_c5fm "$N $C5 --models fm --lr 0.2,0.3,0.5,1 --init-scale 0,0.1"
job N_c5fwfm "$N $C5 --models fwfm --lr 0.2,0.3,0.5,1 --init-scale 0,0.1"
job N_c5ffm "$N $C5 --models ffm --lr 0.1,0.2,0.3 --init-scale 0,0.1"
job N_i5fm "$N $I5 --models fm --lr 0.2,0.3,0.5 --init-scale 0,0.1"
job N_i5fwfm "$N $I5 --models fwfm --lr 0.2,0.3,0.5 --init-scale 0,0.1"
job N_i5ffm "$N $I5 --models ffm --lr 0.2,0.3 --init-scale 0.1,0.3"
job N_f5 "$N $F5 --models ffm --lr 0.2 --init-scale 0,0.1; $N $F5 --models fm,fwfm --lr 0.3,0.5"
job N_c6ffm "$N $C6 --models ffm --lr 0.2 --init-scale 0.1"
job N_c6fm "$N $C6 --models fm --lr 0.3,0.5 --init-scale 0.1"
job N_c6fwfm "$N $C6 --models fwfm --lr 0.3"
job N_seeds "$N $C5 --models ffm --lr 0.2 --init-scale 0.1 --seed 2; $N $C5 --models ffm --lr 0.2 --init-scale 0.1 --seed 3"
# H. the GPU at batch 4096 with the library's defaults (rows normalized), 10^5 and 10^6 rows
job H_gpu "$N $C5 --backend cuda --batch 4096 --models ffm,fm,fwfm --lr 0; $N $C6 --backend cuda --batch 4096 --models ffm,fm,fwfm --lr 0"
wait $pids
for f in "$out"/parts/*.txt; do
    echo "### $(basename "$f" .txt)"
    cat "$f"
done >"$out/all.txt"
