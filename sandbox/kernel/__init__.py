"""A kernel and its parts: the contract, the process, the messaging, snapshots, introspection, the
in-kernel helper, launchers, warm pools and the conformance suite.
"""
