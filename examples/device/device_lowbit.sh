#!/bin/bash
# nvidia-h200, one call (repo root): the named captures of examples/lowbit_captures.py, each in its
# own process, then one tarball of everything (traces, stamps, .model.json, logs) in $OUT.
# usage: bash .dev/lowbit/run.sh TOTAL_S NAME...   (no NAME: all)
TOTAL=${1:-540}; shift
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
W=/tmp/lowbit; rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc
  python3 -c "import torch, transformers, triton; print(torch.__version__, torch.version.cuda, transformers.__version__, triton.__version__)"; } 2>&1 | tee $W/env.log
python3 examples/lowbit_captures.py all "$@" --device cuda --out $W --budget $((TOTAL - SECONDS - 15)) 2>&1 \
  | grep --line-buffered -v -e USDT | tee $W/captures.log
ls -la $W
tar czf $OUTD/lowbit.tgz -C $W . && ls -la $OUTD
echo "done in ${SECONDS}s"
