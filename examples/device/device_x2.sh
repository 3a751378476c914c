#!/bin/bash
# One call on nvidia-h200-x2: the TP capture (both GPUs), then the capture-overhead bench on GPU 0.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
(bash .dev/device_tp.sh cuda)
cd .dev && CUDA_VISIBLE_DEVICES=0 timeout 330 python3 bench/capture_overhead.py --device cuda \
  --rounds 24 --steps 16 --skip 4 --json $OUTD/overhead_x2.json 2>&1 | grep --line-buffered -v Warning | tee $OUTD/overhead_x2.log
echo "all done in ${SECONDS}s"
