"""Kernel environments: pinned package sets that kernels run in (``themisto kernel-env``).

``manage`` makes and removes one, from its ``environment_spec`` (what it holds, its id, its record), with
``venv`` and ``docker_image``; ``environment_registry`` keeps names, records and the datasets built in each;
``location`` is where one lives by its id, which is all the backends need to launch a kernel in it.
"""
