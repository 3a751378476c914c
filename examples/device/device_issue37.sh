#!/bin/bash
# nvidia-h200, one call (repo root): examples/issue37_captures.py, each capture in its own process,
# then one tarball (traces, stamps, .model.json, logs) in $OUT. Carry folder: .dev/issue37, a copy of
# what sync_lowbit.sh builds plus examples/issue37_captures.py (tests/fixtures/captured/README.md).
# usage: bash .dev/issue37/run.sh TOTAL_S NAME...   (no NAME: all)
TOTAL=${1:-540}; shift
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
W=/tmp/issue37; rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc
  python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__, torch.get_num_threads())"; } 2>&1 | tee $W/env.log
python3 examples/issue37_captures.py all "$@" --device cuda --out $W --budget $((TOTAL - SECONDS - 15)) 2>&1 \
  | grep --line-buffered -v -e USDT | tee $W/captures.log
ls -la $W
tar czf $OUTD/issue37.tgz -C $W . && ls -la $OUTD
echo "done in ${SECONDS}s"
