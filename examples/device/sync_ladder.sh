#!/bin/sh
# Build the device's copy of examples/ladder_captures.py: /work/main/.dev/ladder (git-ignored; carry
# [".dev/ladder"]): sync_lowbit.sh's capture files, then the ladder script and its run.sh.
# usage: sh examples/device/sync_ladder.sh [WORKTREE]; then on the device:
#        bash .dev/ladder/run.sh STEP,STEP,...
set -e
W=${1:-$(cd "$(dirname "$0")/../.." && pwd)}; D=/work/main/.dev/ladder
D=$D sh "$W/examples/device/sync_lowbit.sh" "$W"
cp $W/examples/ladder_captures.py $D/examples/
cp $W/examples/device/device_ladder.sh $D/run.sh
echo "synced the ladder captures -> $D"
