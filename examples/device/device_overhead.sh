#!/bin/bash
# nvidia-h200: the capture-overhead bench, longer (with_stack on, then off)
export PYTHONUNBUFFERED=1
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
cd .dev
timeout 230 python3 bench/capture_overhead.py --device cuda --rounds 40 --steps 16 --skip 4 --json $OUTD/overhead_stack.json 2>&1 | grep --line-buffered -v Warning | tee $OUTD/overhead_stack.log
timeout 150 python3 bench/capture_overhead.py --device cuda --rounds 40 --steps 16 --skip 4 --no-stack --json $OUTD/overhead_nostack.json 2>&1 | grep --line-buffered -v Warning | tee $OUTD/overhead_nostack.log
echo "all done in ${SECONDS}s"
