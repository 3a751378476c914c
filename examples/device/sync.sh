#!/bin/sh
# copy the capture branch's scripts and collectors into /work/main/.dev (what travels to the device)
W=/work/wt-capture; D=/work/main/.dev
cp $W/collectors/torch_capture.py $W/collectors/provenance.py $D/collectors/
cp $W/examples/h200_captures.py $W/examples/capture_common.py $W/examples/tp_capture.py $D/examples/
cp $W/bench/capture_overhead.py $D/bench/
