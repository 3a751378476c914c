#!/bin/sh
# Build the device's copy of examples/lowbit_captures.py: /work/main/.dev/lowbit (git-ignored; carried
# with carry=[".dev/lowbit"]). The device has torch but no polars: collectors/__init__.py is
# collectors_init_stub.py and attrib/trace.py is attrib.trace's step_name alone, cut from the real file.
# usage: sh examples/device/sync_lowbit.sh [WORKTREE]; then on the device:
#        bash .dev/lowbit/run.sh TOTAL_S NAME...
set -e
W=${1:-$(cd "$(dirname "$0")/../.." && pwd)}; D=${D:-/work/main/.dev/lowbit}
rm -rf $D; mkdir -p $D/collectors/rocprof $D/attrib $D/examples
cp $W/examples/device/collectors_init_stub.py $D/collectors/__init__.py
cp $W/collectors/torch_capture.py $W/collectors/sampled.py $W/collectors/provenance.py \
   $W/collectors/limits.py $W/collectors/outputs.py $D/collectors/
cp $W/collectors/rocprof/roctx.py $D/collectors/rocprof/
: > $D/collectors/rocprof/__init__.py
cp $W/attrib/__init__.py $W/attrib/errors.py $W/attrib/output.py $W/attrib/version.py \
   $W/attrib/bounds.py $D/attrib/
python3 - "$W/attrib/trace.py" "$D/attrib/trace.py" <<'PY'
import ast, sys
src = open(sys.argv[1]).read()
fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "step_name")
open(sys.argv[2], "w").write('"""attrib.trace.step_name alone (device stub)."""\nfrom __future__ import annotations\n\n\n'
                             + ast.get_source_segment(src, fn) + "\n")
PY
cp $W/examples/lowbit_captures.py $W/examples/h200_captures.py $W/examples/capture_common.py $D/examples/
cp $W/examples/device/device_lowbit.sh $D/run.sh
echo "synced $W -> $D"
