"""CPU kernels, apart from the decode loop: which set a model's forwards run.

* :mod:`.select`            switch a model to a kernel set (``stock`` or ``numba``) and back
* :mod:`.rowwise_linear`    a linear layer reading each weight row once for all tokens (numba)
* :mod:`.rowwise_attention` the attention kernel matching it (registered with transformers)
* :mod:`.activation`        SiLU and tanh GELU, each value's result its own (numba)
* :mod:`.dtypes`            how the kernels read bfloat16 and float16

This module stays light (no torch, no numba): the kernel set names are read by the latency
profile and the CLI.
"""

#: The kernel sets: ``stock`` (torch/transformers) and ``numba`` (the row-wise kernels).
KERNEL_NAMES = ("stock", "numba")
#: The dtypes the ``numba`` kernels run (a profile that times them records these: before half
#: precision was routed, ``numba`` ran float32 alone).
KERNEL_DTYPES = ("float32", "bfloat16", "float16")
