"""The private names and patches of other libraries this package relies on, in one place per side: `jupyter`
(the host's, of jupyter_client and jupyter_core) and `in_kernel` (the kernel's, of ipykernel, IPython,
traitlets, dill, pandas, numpy and the standard library, sent inside the helper and the template's program).

Each function says which versions it was tested on; pyproject.toml bounds those libraries at them, and the
newest-versions lane (scripts/newest-versions.sh) says when a bound can be lifted.
"""
