"""Control tier: the controller runtime over real switches and the gRPC hint API.

:mod:`~safs.control.controller` (switch links, arbitration, pipeline push, the scheduler loop)
and :mod:`~safs.control.hintapi` (service, client, stubs). Imports :mod:`safs.core` and
:mod:`safs.targets`.
"""
