"""Kernels brought to recorded states.

Building a dataset replays sessions in a kernel (``build``); serving a sample's state restores a snapshot or
replays recorded cells (``state``); model-written code runs in disposable copies (``disposable``); kernel
environments pin the packages a replay runs with (``environments``); ``resolve`` finds or builds a dataset;
``dataset`` opens one (:class:`~themisto_env.replay.dataset.Dataset`: checked, cached per process, its
samples listed without an env).
"""
