"""Importing this module puts the importing process in a session (and process group) of its own.

The local Dask workers' forkserver imports it first (``flows.scale_out.WORKER_PRELOAD``): the forkserver and
every worker forked from it then leave the command's process group, so a terminal's Ctrl-C, which the terminal
sends to that whole group, reaches the command alone, and the command stops its workers itself, in order (a
worker that took the Ctrl-C would die under a running task and leave the flow waiting on it). The workers still
end with the command: the forkserver stops when the command's end closes its pipe, and Dask's nannies (in the
command's process) stop their workers.
"""

from transit_release.runtime.subprocesses import own_session

own_session()
