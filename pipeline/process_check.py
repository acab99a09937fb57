"""Whether a recorded process id is still the process that recorded it, on any system.

Read through psutil (Linux, macOS, Windows), never from `/proc`: a check that needed `/proc` took
every live pid for the trainer on a Mac, so a dead run stayed "running" and blocked new runs.
Torch-free, so the app can ask it at once.
"""

from __future__ import annotations


def command_alive(pid: int | None, *words: str) -> bool:
    """True when process `pid` runs (not a zombie) and its command line holds every one of `words`
    (so a pid the system reused for another program does not count). A process whose command line
    cannot be read (another user's) is taken as alive, as a process that exists."""
    if not pid:
        return False
    import psutil  # noqa: PLC0415 - a dependency (requirements.txt); kept out of the app's start-up imports

    try:
        process = psutil.Process(int(pid))
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
        cmdline = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True
    return all(word in cmdline for word in words)
