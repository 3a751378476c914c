#!/bin/bash
# nvidia-h200: two processes taking turns, the sampler every=1000 with stack (bench/sampled_paired.py).
# Built into /work/main/.cap_calib by sync_calib.sh; run there as: bash .cap_calib/paired.sh (~490 s).
cd "$(dirname "$0")"; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
F="grep --line-buffered -v -e Warning -e USDT -e _warn_once"
{ date -u; nvidia-smi -L; nproc; uptime; python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"; } 2>&1 | tee $OUT/env4.log
timeout 560 python3 bench/sampled_paired.py --device cuda --every ${EVERY:-1000} --seconds ${SECS:-440} --control ${CTRL:-130} ${EXTRA} --json $OUT/paired4.json 2>&1 | $F > $OUT/paired4.log
tail -c 5000 $OUT/paired4.log | grep -v '^   ' | tail -n 80
ls -la $OUT; echo "all done in ${SECONDS}s"
