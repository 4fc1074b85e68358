#!/usr/bin/env python3
"""gpucheck.py's reading of an element's log where gst-launch -m wrote a
message's header, a debug record of another thread came next, and the
message's structure followed: the record sits at the end of the header's
line.  The start-up figures must still find every frame (the first
frame's return among them), as they do in the same log without the glue.
And the processes' CPU loads from the ppdiffuse-stats messages: the
medians of the intervals with frames out, the first two left out, a
worker's of those where it is known.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GPUCHECK = os.path.join(HERE, 'gpucheck.py')
FRAMES = 8


def record(t, text):
    """A GStreamer debug record at @t seconds, as GST_DEBUG writes it."""
    return (f'0:00:{t:012.9f} 4242 0x55d0c0ffee00 DEBUG              '
            f'ppdiffuse gstppdiffuse.c:1:fn:<ppdiffuse0> {text}')


def clock(t):
    return f'0:00:{t:012.9f}'


def element_log(glue):
    """The lines of a one-worker run of FRAMES frames; with @glue, frame
    0's return record is glued after a message header."""
    lines = [
        record(0.10, 'progress 0%: starting the ppdiffuse worker mesh'),
        record(0.20, 'progress 20%: starting 1 workers'),
        record(0.70, 'progress 100%: the ppdiffuse worker mesh is up'),
    ]
    for f in range(FRAMES):
        t = 0.80 + 0.01 * f
        lines.append(record(t, f'submitting frame {clock(f / 30)} as '
                            f'chunk {f}'))
        back = record(t + 0.005, f'chunk {f} back after {clock(0.005)}')
        if glue and f == 0:
            lines.append('Got message #17 from element "ppdiffuse0" '
                         '(progress): ' + back)
            lines.append('GstMessageProgress, type=(string)complete;')
        else:
            lines.append(back)
        lines.append(record(t + 0.006, f'pushing chunk {f} pts '
                            f'{clock(f / 30)}'))
    # Idle (no frame out), the warm-up's two, then the steady ones (the
    # last before the worker's load is known, as after a restart).
    for n, (fps, cpu, workers) in enumerate(
            [(0, 9.0, '9'), (10, 3.0, '3'), (10, 2.0, '2'), (10, 0.5, '1'),
             (10, 0.6, '1.2'), (10, 0.4, '0.8'), (10, 0.5, '0')]):
        lines.append(f'Got message #{40 + n} from element "ppdiffuse0" '
                     f'(element): ppdiffuse-stats, frames-in=(guint64)8, '
                     f'fps=(double){fps}, worker-busy=(double)< 0.5 >, '
                     f'worker-cpu-load=(double)< {workers} >, '
                     f'cpu-load=(double){cpu}, device=(string)"cuda:0\\ '
                     'NVIDIA\\ H200\\,\\ sm_90\\,\\ 139.8\\ GiB";')
    return '\n'.join(lines) + '\n'


def startup(text):
    with tempfile.NamedTemporaryFile('w', suffix='.log') as log:
        log.write(text)
        log.flush()
        run = subprocess.run([sys.executable, GPUCHECK, 'startup', log.name,
                              '--skip', '2', '--frames', str(FRAMES)],
                             capture_output=True, text=True, timeout=60)
    return run.returncode, run.stdout + run.stderr


def main():
    failed = 0
    for glue in (False, True):
        status, out = startup(element_log(glue))
        name = 'glued record' if glue else 'plain log'
        ok = (status == 0 and 'first frame round trip 5 ms' in out
              and 'CPU rank 0 0.50 cores, worker 1 1.00 (medians of 4 '
              'stats intervals)' in out
              and 'rank 0 on cuda:0 NVIDIA H200, sm_90, 139.8 GiB' in out)
        print(f'{"ok" if ok else "FAILED"}: {name}: status {status}: '
              f'{out.strip()}')
        failed += not ok
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
