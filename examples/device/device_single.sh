#!/bin/bash
# One call on nvidia-h200: overhead bench first, then every single-GPU capture, all fail-soft.
# usage (repo root): bash .dev/device_single.sh DEVICE [TOTAL_S] [extra args for tiny runs]
DEV=${1:-cuda}; TOTAL=${2:-545}; shift 2; EXTRA="$@"
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
W=/tmp/cap; rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1
cd .dev
{ date -u; nvidia-smi -L 2>/dev/null; python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__, torch.cuda.is_available())"; } 2>&1 | tee $W/env.log
timeout 170 python3 bench/capture_overhead.py --device $DEV --json $W/overhead.json $EXTRA 2>&1 | grep --line-buffered -v Warning | tee $W/overhead.log
LEFT=$((TOTAL - SECONDS))
echo "== captures with budget ${LEFT}s"
python3 examples/h200_captures.py all --device $DEV --out $W --budget $LEFT $EXTRA 2>&1 | tee $W/captures.log
ls -la $W
tar czf $OUTD/single.tgz -C $W . && ls -la $OUTD
SZ=$(stat -c %s $OUTD/single.tgz)
if [ $SZ -gt 15000000 ]; then (cd $OUTD && split -b 15000000 -d single.tgz single.tgz.part && rm single.tgz); fi
ls -la $OUTD
echo "done in ${SECONDS}s"
