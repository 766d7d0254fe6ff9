"""The latency profile: what each sub-layer of a model costs, so what a mask saves.

* :mod:`.profile`  :class:`~.profile.LatencyProfile`, its model-bound JSON file and the speedup it predicts
* :mod:`.profiler` measuring one on the loaded model (and choosing the CPU kernel set)

It sits below the decoder (KnapSpec's controller and the predicted speedups read it) and above
the runtime and the kernels it times.
"""
