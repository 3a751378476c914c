#!/bin/bash
# One call on nvidia-h200-x2: the tensor-parallel capture (both ranks), NVLink multicast off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
DEV=${1:-cuda}; shift; EXTRA="$@"
OUTD=${OUT:-/tmp/devout}; mkdir -p $OUTD
W=/tmp/tpcap; rm -rf $W; mkdir -p $W
cd .dev
{ date -u; nvidia-smi -L 2>/dev/null; nvidia-smi topo -m 2>/dev/null; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"; } 2>&1 | tee $W/env.log
timeout 300 python3 examples/tp_capture.py --world 2 --device $DEV --check --out $W $EXTRA 2>&1 | grep --line-buffered -v Warning | tee $W/tp.log
ls -la $W
tar czf $OUTD/tp.tgz -C $W . && ls -la $OUTD
echo "done in ${SECONDS}s"
