#!/bin/bash
# nvidia-h200, from the repo root: examples/ladder_captures.py's STEPS x 3 runs, each in its own
# process, then one tarball (traces, stamps, .model.json, logs) in $OUT.
# usage: bash .dev/ladder/run.sh s0_eager,s1_sdpa,...
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
W=/tmp/ladder; rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
{ date -u; nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } 2>&1 | tee $W/env.log
python3 examples/ladder_captures.py all --device cuda --out $W --steps "$1" 2>&1 \
  | grep --line-buffered -v -e USDT | tee -a $W/captures.log
tar czf $OUTD/ladder_$(echo $1 | tr ',' '_' | cut -c1-40).tgz -C $W . && ls -la $OUTD
echo "done in ${SECONDS}s"
