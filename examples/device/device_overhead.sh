#!/bin/bash
# nvidia-h200, one call: the capture-overhead bench, with_stack, on the 8-layer Llama (mixed design
# MIXED_S s, windows design WINDOWS_S s), on a Llama-3-8B-shaped model at batch 32 (mixed, BIG=1),
# then the 8-layer one without stack (mixed) with the time left.
# usage (repo root): [MIXED_S=150 WINDOWS_S=120 BIG=1] bash .dev/overhead/run.sh [TOTAL_S]
TOTAL=${1:-540}; MIXED_S=${MIXED_S:-150}; WINDOWS_S=${WINDOWS_S:-120}; BIG=${BIG:-1}
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
B="python3 bench/capture_overhead.py --device cuda"
F="grep --line-buffered -v -e Warning -e USDT"
{ date -u; nvidia-smi -L; nproc; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } 2>&1 | tee $OUTD/env.log
timeout $((MIXED_S + WINDOWS_S + 60)) $B --mixed-s $MIXED_S --windows-s $WINDOWS_S --json $OUTD/l8_stack.json 2>&1 | $F > $OUTD/l8_stack.log
if [ "$BIG" = 1 ]; then
  timeout $((TOTAL - SECONDS - 70 > 240 ? 240 : TOTAL - SECONDS - 70)) $B --layers 32 --hidden 4096 --intermediate 14336 --heads 32 --kv-heads 8 \
    --vocab 128256 --batch 32 --prompt 1024 --blocks 4 --steps 8 --skip 3 --mixed-s 90 --windows-s 0 --json $OUTD/l32_b32_stack.json 2>&1 | $F > $OUTD/l32.log
fi
LEFT=$((TOTAL - SECONDS - 10))
if [ $LEFT -gt 40 ]; then
  timeout $LEFT $B --no-stack --mixed-s $((LEFT - 30)) --windows-s 0 --json $OUTD/l8_nostack.json 2>&1 | $F > $OUTD/l8_nostack.log
fi
ls -la $OUTD; tail -n 3 $OUTD/*.log; echo "all done in ${SECONDS}s"
