#!/bin/bash
# nvidia-h200, one call (repo root): calibrate vs the hand copy/read bench, then the sampled-capture
# overhead bench (OVERHEAD_S seconds of rounds) and the rolling-capture fixture folder.
# usage: [OVERHEAD_S=90 NOSTACK_S=50] bash .cap_calib/run.sh
OVERHEAD_S=${OVERHEAD_S:-90}; NOSTACK_S=${NOSTACK_S:-50}
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
export PYTHONPATH=$PWD
F="grep --line-buffered -v -e Warning -e USDT"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc
  python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"; } 2>&1 | tee $OUTD/env.log
timeout 120 python3 bench/calibrate_check.py --json $OUTD/calib_check.json 2>&1 | $F | tee $OUTD/calib.log | tail -n 40
echo "calibrate done at ${SECONDS}s"
R=$(mktemp -d)/rolling
timeout $((OVERHEAD_S + 150)) python3 bench/sampled_overhead.py --device cuda --seconds $OVERHEAD_S \
  --json $OUTD/sampled_overhead.json --rolling $R 2>&1 | $F > $OUTD/overhead.log
tail -n 45 $OUTD/overhead.log | grep -v '^   ' 
echo "with_stack done at ${SECONDS}s"
timeout $((NOSTACK_S + 90)) python3 bench/sampled_overhead.py --device cuda --seconds $NOSTACK_S --no-stack \
  --json $OUTD/sampled_overhead_nostack.json 2>&1 | $F > $OUTD/overhead_nostack.log
tail -n 45 $OUTD/overhead_nostack.log | grep -v '^   '
tar czf $OUTD/rolling.tar.gz -C $(dirname $R) rolling
ls -la $OUTD $R; echo "all done in ${SECONDS}s"
