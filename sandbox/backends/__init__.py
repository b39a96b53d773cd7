"""The backends' launchers: ``local`` and ``bwrap`` (host subprocesses) and ``docker`` (a container a
kernel), with the Docker engine's client and the kernel containers the host keeps track of.
"""
