"""Steps and phases: from annotations, profiler steps, forward passes or the repeating kernel
loop; tokens per step; step windows."""
