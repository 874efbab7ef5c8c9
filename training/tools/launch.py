"""torchrun with this project's endings:

    python -m training.tools.launch --nproc_per_node=2 run_multitask.py --data_dir ../shared/data/multitask ...

It takes torchrun's flags (``torch.distributed.run``) and starts the same processes; only the end differs.
Under torchrun a bad configuration is one line from process 0 (the others record theirs in their error
files: training/tools/command.py) and then torchrun's ``ChildFailedError`` report and traceback; SIGTERM to torchrun
exits 1 with a traceback. Here a failed run is one line and the failed process's exit code (process 0's
line, or, when another process failed and process 0 did not say why, was ended by torchrun's SIGTERM or failed only
because that one ended, that one's, also written into the run's metrics.json), and SIGTERM or Ctrl-C goes to every
process (each ends "interrupted", resumable, the line said here once) and exits 143 / 130, as one process does.
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from torch.distributed import DistNetworkError
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.run import get_args_parser, run

from .command import LAUNCHED
from ..harness.outputs import read_metrics, write_json
from ..harness.status import UNFINISHED, RunStatus


def main(argv=None) -> int:
    """Exit codes: the failed process's (1 an error, 2 bad flags), 130 Ctrl-C, 143 SIGTERM, 0 finished."""
    parser = get_args_parser()
    parser.prog = "python -m training.tools.launch"
    args = parser.parse_args(argv)
    for name in list(logging.root.manager.loggerDict):   # torchelastic's failure and signal reports: ours is a line
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ[LAUNCHED] = "1"   # the processes leave the stop's line to this one (training/tools/command.py)
    try:
        run(args)
    except ChildFailedError as err:
        return report_failure(err.failures)
    except SignalException as err:   # every process got the signal too and ended cleanly ("interrupted")
        print("interrupted" if err.sigval == signal.SIGINT else "terminated (SIGTERM)", file=sys.stderr)
        return 128 + int(err.sigval)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except ValueError as err:   # torchrun's check of its own flags (--nproc_per_node x)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except DistNetworkError as err:   # --master_port (29500 unless given) taken, e.g. by another run on this machine
        print(f"error: --master_port {args.master_port}: {err} (give another --master_port)", file=sys.stderr)
        return 1
    return 0


def report_failure(failures: dict[int, ProcessFailure]) -> int:
    """The exit code of the process whose line the console shows: process 0's when it recorded one (it printed
    it); else the first to fail, whose line (or signal) is printed here. A process ended by SIGTERM (torchrun's, once
    another failed) comes last, and one that said nothing before one killed by a signal: process 1 killed with SIGKILL
    is named, not process 0's SIGTERM that followed, nor its exit code from the broken connection."""
    rank = 0 if recorded(failures.get(0)) and not terminated(failures[0]) and not lost_peer(failures[0]) else \
        min(failures, key=lambda r: (terminated(failures[r]), lost_peer(failures[r]), not recorded(failures[r]),
                                     not recorded(failures[r]) and failures[r].exitcode >= 0, failures[r].timestamp, r))
    failure = failures[rank]
    if rank != 0 or not recorded(failure) or lost_peer(failure):   # process 0 printed its own line, else not
        print(f"error (process {rank}): {failure.message.removeprefix('error: ')}", file=sys.stderr)
    if rank != 0 or not recorded(failure):   # the run's metrics.json names the process that ended it
        name_in_metrics(failures.get(0), f"process {rank}: {failure.message.removeprefix('error: ')}")
    if recorded(failure):   # its own exit code (torchrun may have ended it with SIGTERM just after it said why)
        return int(failure.error_file_data["exit_code"])
    return 128 - failure.exitcode if failure.exitcode < 0 else failure.exitcode   # a signal: the shell's 128 + n


def lost_peer(failure: ProcessFailure) -> bool:
    """Whether the process failed because another one ended first (training/harness/distributed.py ``peer_lost``)."""
    return recorded(failure) and failure.error_file_data.get("lost_peer") is True


def name_in_metrics(first: ProcessFailure | None, error: str) -> None:
    """Write ``error`` into the run's metrics.json (process 0 recorded where the run is), where process 0 could only
    say that another process ended first."""
    data = first.error_file_data if first is not None and isinstance(first.error_file_data, dict) else {}
    run_dir = data.get("run_dir")
    metrics = read_metrics(Path(run_dir)) if isinstance(run_dir, str) else {}
    if metrics.get("status") in (RunStatus.FAILED, *UNFINISHED):   # its status as process 0 left it: --resume goes on
        with contextlib.suppress(OSError):
            write_json(Path(run_dir) / "metrics.json", {**metrics, "error": error})


def terminated(failure: ProcessFailure) -> bool:
    """Whether the process ended by SIGTERM (what torchrun sends the others once one failed): its line says so, or
    it had none."""
    code = failure.error_file_data["exit_code"] if recorded(failure) else 128 - failure.exitcode
    return code == 128 + signal.SIGTERM


def recorded(failure: ProcessFailure | None) -> bool:
    """Whether the process wrote its line and exit code in its error file (training/tools/command.py)."""
    return failure is not None and isinstance(failure.error_file_data, dict) \
        and isinstance(failure.error_file_data.get("exit_code"), int)


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
