#!/usr/bin/env python3
"""Comparisons and log checks for tests/gpu/run.sh (standard library only:
the GPU machine's python3 may lack numpy).  Every command prints its figures
on one line per item and exits 0 when within its bound, 1 when not, 2 when
its input cannot be read.

  npy LABEL OUT.npy REF.npy [--tap F32F64.txt NAME] [--abs A] [--rel R]
      [--nmse N]
        float32 arrays of the same shape; bounds (all that are given):
        --tap: the CPU backends' bound of tests/kernels/models/test-models.c,
          max|diff| <= 5 * max(f32-f64 of tap NAME, 4 * FLT_EPSILON * max|ref|);
        --abs: max|diff| <= A;  --rel: max|diff| <= R * max(1, max|ref|)
        (npy-compare's);  --nmse: sum (out-ref)^2 / sum ref^2 <= N.
  frames LABEL REF_PREFIX OUT_PREFIX COUNT [--levels L | --exact]
      [--max-mean M] [--max-clamped F] [--or-as-far-as A_PREFIX B_PREFIX]
        raw 8-bit frames PREFIX-NN.rgb, NN = 00 .. COUNT-1: at most L levels
        apart (or byte for byte with --exact), and with --max-mean a mean
        difference of at most M levels; with --or-as-far-as, each frame's
        bounds rise to the max and mean difference of A-NN and B-NN when
        those are larger; with --max-clamped, at most that
        fraction of the reference's bytes may be 0 or 255 (a comparison of
        clamped bytes sees nothing).  The reference frames must differ from
        each other (else they do not depend on the input).
  tame MODEL_DIR [--gain G]
        scales the last convolution of a make-tiny pipeline's TAESD decoder
        by G (default 0.003) and centres it on 0.5, so that the decoded
        frames of random weights land inside 0..255 instead of being clamped
        (99 % of their bytes are 0 or 255 otherwise; 0.5 % with it).
  pattern OUT.npy SHA256_FILE
        the 512x512 pattern image of tests/reference/make_shape_fixtures.py
        (TAESD's encode fixture), checked against the stored SHA-256.
  mesh-log LOG --workers W --frames F --backend B [--device R=DEV ...]
      [--plane mpi|nccl|nccl-emulated] [--graphs on|off]
        a gst-launch run's log (GST_DEBUG=ppdiffuse:5, PPDIFFUSE_DEBUG=4):
        every worker R ran backend B on device DEV ("cuda:1", or a prefix
        such as "CPU"), rank 0 and every worker name the data plane, every
        chunk sent went over that plane, every worker took F chunks and
        stopped cleanly, and (--graphs on) every worker captured one step
        graph, at its second chunk, and launched it for every later one
        (warm-up passes included), and rank 0 one encoding graph and one
        decoding graph (F >= 3), or (--graphs off) none.
  fault LOG ELAPSED_S BOUND_S RANK KIND
        a run with PPDIFFUSE_FAULT=rank:RANK,...,kind:KIND that must fail:
        the fault was injected, the element's error names the rank, and the
        process ended at most BOUND_S after the mesh was up (ELAPSED_S: the
        run's wall time; the log's clock starts with the process).
  startup LOG [--skip N] [--frames F] [--max-ready S]
          [--gpu-samples CSV --t0 EPOCH] [--rows FILE --row NAME]
        the start-up figures of a GST_DEBUG=ppdiffuse:5 log: spawn -> ready,
        the first frame's round trip and push, and the steady frame period
        and round trip (medians over the chunks from N on, default 5) and
        rate (their mean: frames that leave a pass together come in
        bursts); with
        --frames, all F frames must have been pushed.  With --gpu-samples
        CSV --t0 EPOCH (nvidia-smi's timestamp, index, utilization.gpu,
        clocks.sm and power.draw, csv, noheader, nounits; EPOCH: the wall
        time the process started, where the log's clock starts), each
        GPU's utilization (the share of time a kernel ran), SM clock and
        power over the steady frames: samples taken between the first
        steady frame's push and the last one's.  With --rows FILE --row
        NAME, one line of a table is appended to FILE: the steady rate,
        the round trip's median and p95, each GPU's mean utilization, the
        processes' CPU loads (rank 0's, then each worker's, in cores: the
        medians of the ppdiffuse-stats messages gst-launch -m wrote, the
        intervals with frames out but the first two), and NAME ("-" for a
        figure the log does not give).
"""
import datetime
import array
import hashlib
import json
import math
import os
import re
import statistics
import struct
import sys

FLT_EPSILON = 2.0 ** -23
TAP_ERR_FACTOR = 5.0
TAP_FLOOR_ULPS = 4.0


class Unreadable(Exception):
    pass


def fail_input(msg):
    raise Unreadable(msg)


# ---- npy ------------------------------------------------------------------

def load_npy(path):
    try:
        data = open(path, 'rb').read()
    except OSError as e:
        fail_input(f'{path}: {e.strerror}')
    if data[:6] != b'\x93NUMPY':
        fail_input(f'{path}: not a .npy file')
    major = data[6]
    if major == 1:
        hlen = struct.unpack('<H', data[8:10])[0]
        start = 10
    else:
        hlen = struct.unpack('<I', data[8:12])[0]
        start = 12
    header = data[start:start + hlen].decode('latin1')
    descr = re.search(r"'descr':\s*'([^']+)'", header)
    fortran = re.search(r"'fortran_order':\s*(True|False)", header)
    shape = re.search(r"'shape':\s*\(([^)]*)\)", header)
    if not descr or not fortran or not shape:
        fail_input(f'{path}: unreadable npy header {header!r}')
    if descr.group(1) != '<f4' or fortran.group(1) != 'False':
        fail_input(f'{path}: {descr.group(1)}, fortran_order '
                   f'{fortran.group(1)}: expected little-endian float32 in '
                   'C order')
    dims = tuple(int(x) for x in shape.group(1).replace(' ', '').split(',')
                 if x)
    a = array.array('f')
    a.frombytes(data[start + hlen:])
    if sys.byteorder != 'little':
        a.byteswap()
    n = 1
    for d in dims:
        n *= d
    if len(a) != n:
        fail_input(f'{path}: {len(a)} values for shape {dims}')
    return dims, a


def save_npy(path, dims, values):
    shape = ', '.join(str(d) for d in dims) + (',' if len(dims) == 1 else '')
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" \
        % shape
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    a = array.array('f', values)
    if sys.byteorder != 'little':
        a.byteswap()
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)))
        f.write(header.encode('latin1'))
        f.write(a.tobytes())


def tap_error(path, name):
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail_input(f'{path}: {e.strerror}')
    for line in lines:
        f = line.split()
        if len(f) == 4 and f[0] == name:
            return float(f[2]), float(f[3])
    fail_input(f'{path}: no tap {name}')


def cmd_npy(args):
    label, out_path, ref_path = args[0], args[1], args[2]
    opts = args[3:]
    tap = absb = rel = nmse_b = None
    i = 0
    while i < len(opts):
        if opts[i] == '--tap':
            tap = (opts[i + 1], opts[i + 2])
            i += 3
        elif opts[i] in ('--abs', '--rel', '--nmse'):
            v = float(opts[i + 1])
            if opts[i] == '--abs':
                absb = v
            elif opts[i] == '--rel':
                rel = v
            else:
                nmse_b = v
            i += 2
        else:
            fail_input(f'npy: unknown option {opts[i]}')
    dims_o, out = load_npy(out_path)
    dims_r, ref = load_npy(ref_path)
    if dims_o != dims_r:
        print(f'{label}: shape {list(dims_o)}, reference {list(dims_r)}')
        return 1
    diff = 0.0
    ref_max = 0.0
    err2 = 0.0
    ref2 = 0.0
    for x, r in zip(out, ref):
        e = abs(x - r)
        if not e <= diff:           # NaN never passes
            diff = e if e == e else float('inf')
        if abs(r) > ref_max:
            ref_max = abs(r)
        err2 += (x - r) * (x - r)
        ref2 += r * r
    nmse = err2 / ref2 if ref2 > 0 and diff != float('inf') else float('inf')
    bounds = []
    ok = True
    if tap is not None:
        listed_max, f32f64 = tap_error(*tap)
        b = TAP_ERR_FACTOR * max(f32f64, TAP_FLOOR_ULPS * FLT_EPSILON * ref_max)
        bounds.append(f'bound {b:.2e} = 5 x max(f32-f64 {f32f64:.2e}, '
                      '4 ulp of max|ref|)')
        ok = ok and diff <= b
    if absb is not None:
        bounds.append(f'bound {absb:.1e}')
        ok = ok and diff <= absb
    if rel is not None:
        b = rel * max(1.0, ref_max)
        bounds.append(f'bound {b:.2e} = {rel:.0e} x max(1, max|ref|)')
        ok = ok and diff <= b
    nmse_text = f'NMSE {nmse:.3e}'
    if nmse_b is not None:
        nmse_text += f' (bound {nmse_b:.1e})'
        ok = ok and nmse <= nmse_b
    print(f'{label}: max|diff| {diff:.3e} of max|ref| {ref_max:.4g}'
          f'{" (" + "; ".join(bounds) + ")" if bounds else ""}, {nmse_text}'
          f'{"" if ok else "  <-- past its bound"}')
    return 0 if ok else 1


# ---- frames ---------------------------------------------------------------

def frame_pair(label, n, ref_prefix, out_prefix):
    """Frame @n of both prefixes, as bytes, or None (said) when one is
    missing or they differ in size."""
    rp = f'{ref_prefix}-{n:02d}.rgb'
    op = f'{out_prefix}-{n:02d}.rgb'
    if not os.path.exists(op) or not os.path.exists(rp):
        print(f'{label} frame {n:02d}: '
              f'{op if not os.path.exists(op) else rp} is missing')
        return None
    a = open(rp, 'rb').read()
    b = open(op, 'rb').read()
    if len(a) != len(b) or not a:
        print(f'{label} frame {n:02d}: {op} has {len(b)} bytes, {rp} '
              f'{len(a)}')
        return None
    return a, b


def cmd_frames(args):
    label, ref_prefix, out_prefix, count = args[0], args[1], args[2], \
        int(args[3])
    levels = None
    exact = False
    max_clamped = None
    max_mean = None
    # --or-as-far-as A B: frame n may also differ as much as A-NN and
    # B-NN differ (the larger max and mean of the two bounds), e.g. a 16-bit
    # run's other rounding held to what the 16 bits themselves cost.
    apart = None
    i = 4
    while i < len(args):
        if args[i] == '--levels':
            levels = int(args[i + 1])
            i += 2
        elif args[i] == '--exact':
            exact = True
            i += 1
        elif args[i] == '--max-clamped':
            max_clamped = float(args[i + 1])
            i += 2
        elif args[i] == '--max-mean':
            max_mean = float(args[i + 1])
            i += 2
        elif args[i] == '--or-as-far-as':
            apart = (args[i + 1], args[i + 2])
            i += 3
        else:
            fail_input(f'frames: unknown option {args[i]}')
    if levels is None and not exact:
        fail_input('frames: give --levels L or --exact')
    ok = True
    for n in range(count):
        pair = frame_pair(label, n, ref_prefix, out_prefix)
        if pair is None:
            ok = False
            continue
        a, b = pair
        diffs = [abs(x - y) for x, y in zip(a, b)]
        m = max(diffs)
        mean = sum(diffs) / len(diffs)
        frame_levels, frame_mean = levels, max_mean
        if apart is not None and not exact:
            pair = frame_pair(label, n, apart[0], apart[1])
            if pair is None:
                ok = False
                continue
            xa, xb = pair
            da = [abs(x - y) for x, y in zip(xa, xb)]
            frame_levels = max(levels, max(da))
            if max_mean is not None:
                frame_mean = max(max_mean, sum(da) / len(da))
            print(f'{label} frame {n:02d}: {os.path.basename(apart[0])} and '
                  f'{os.path.basename(apart[1])} are {max(da)} levels apart '
                  f'at most, {sum(da) / len(da):.4f} on average')
        differing = sum(1 for d in diffs if d) / len(diffs)
        clamped = sum(1 for x in a if x == 0 or x == 255) / len(a)
        good = (m == 0) if exact else (m <= frame_levels)
        note = '' if good else '  <-- past its bound'
        if frame_mean is not None and mean > frame_mean:
            good = False
            note = f'  <-- mean past {frame_mean:.4f}'
        if max_clamped is not None and clamped > max_clamped:
            good = False
            note = (f'  <-- {clamped:.1%} of the reference is clamped (at '
                    f'most {max_clamped:.1%}): the comparison sees nothing')
        print(f'{label} frame {n:02d}: max level diff {m} '
              f'(bound {"0, byte for byte" if exact else frame_levels}), mean '
              f'{mean:.4f}{f" (bound {frame_mean:.4f})" if frame_mean is not None else ""}'
              f', {differing:.2%} of bytes differ, {clamped:.2%} of the '
              f'reference at 0 or 255{note}')
        ok = ok and good
    if count > 1:
        seen = set()
        for n in range(count):
            rp = f'{ref_prefix}-{n:02d}.rgb'
            if os.path.exists(rp):
                seen.add(hashlib.sha256(open(rp, 'rb').read()).hexdigest())
        if len(seen) == 1:
            print(f'{label}: every reference frame is the same: the frames '
                  'do not depend on the input')
            ok = False
    extra = f'{out_prefix}-{count:02d}.rgb'
    if os.path.exists(extra):
        print(f'{label}: more frames came out than went in ({extra})')
        ok = False
    return 0 if ok else 1


# ---- tame -----------------------------------------------------------------

def cmd_tame(args):
    model = args[0]
    gain = float(args[2]) if len(args) > 2 and args[1] == '--gain' else 0.003
    path = os.path.join(model, 'vae', 'diffusion_pytorch_model.safetensors')
    try:
        b = bytearray(open(path, 'rb').read())
    except OSError as e:
        fail_input(f'{path}: {e.strerror}')
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    base = 8 + n
    layers = [int(m.group(1)) for k in h
              for m in [re.match(r'decoder\.layers\.(\d+)\.weight$', k)] if m]
    if not layers:
        fail_input(f'{path}: no decoder.layers.N.weight')
    last = max(layers)
    for key, centre in ((f'decoder.layers.{last}.weight', 0.0),
                        (f'decoder.layers.{last}.bias', 0.5)):
        if h[key]['dtype'] != 'F32':
            fail_input(f'{path}: {key} is {h[key]["dtype"]}, expected F32')
        s, e = h[key]['data_offsets']
        a = array.array('f')
        a.frombytes(bytes(b[base + s:base + e]))
        a = array.array('f', [x * gain + centre for x in a])
        b[base + s:base + e] = a.tobytes()
    open(path, 'wb').write(b)
    print(f'{path}: decoder.layers.{last} scaled by {gain}, centred on 0.5')
    return 0


# ---- pattern --------------------------------------------------------------

def cmd_pattern(args):
    """make_shape_fixtures.py's pattern_image () as test-models.c builds it:
    GLib's g_rand_new_with_seed_array is the Mersenne Twister's
    init_by_array, as Python's random.seed (int) is."""
    import random
    out, digest_file = args[0], args[1]
    size, period, seed, noise_bits = 512, 256, 5301, 8
    slopes = ((3, 1, 5, -2), (2, -3, -1, 4), (-1, 2, 3, 3))
    phases, weights = (17, 41), (3, 1)
    den = (weights[0] + weights[1]) * period
    rng = random.Random(seed)
    vals = []
    for c in range(3):
        s = slopes[c]
        for y in range(size):
            for x in range(size):
                t1 = (s[0] * x + s[1] * y + phases[0] * c) % period
                t2 = (s[2] * x + s[3] * y + phases[1] * c) % period
                noise = (rng.getrandbits(32) >> (32 - noise_bits)) \
                    - (1 << (noise_bits - 1))
                v = weights[0] * (2 * abs(2 * t1 - period) - period) \
                    + weights[1] * (2 * abs(2 * t2 - period) - period) + noise
                vals.append(min(1.0, max(-1.0, v / den)))
    a = array.array('f', vals)
    if sys.byteorder != 'little':
        a.byteswap()
    got = hashlib.sha256(a.tobytes()).hexdigest()
    want = open(digest_file).read().strip()
    if got != want:
        print(f'pattern image: SHA-256 {got}, the fixture says {want}')
        return 1
    save_npy(out, (1, 3, size, size), vals)
    return 0


# ---- logs -----------------------------------------------------------------

WORKER = re.compile(r'\[ppdiffuse rank (\d+) pid (\d+)\] +\w+ +(.*)$')
RANK0 = re.compile(r'rank 0: (.*)$')


# A GStreamer debug record (time, pid, thread) that another writer's
# unfinished line ran into: gst-launch -m prints a message's header and its
# structure in two writes, and a debug line of another thread may come
# between them.
GLUED_RECORD = re.compile(r'(?<=\S)\s*(?=\d+:\d\d:\d\d\.\d{9} +\d+ +0x[0-9a-f]+ )')


def read_log(path):
    """@path's lines, a debug record glued after another writer's text
    split off onto a line of its own."""
    try:
        text = open(path, errors='replace').read()
    except OSError as e:
        fail_input(f'{path}: {e.strerror}')
    lines = []
    for line in text.splitlines():
        lines.extend(GLUED_RECORD.split(line))
    return lines


def cmd_mesh_log(args):
    path = args[0]
    workers = frames = None
    backend = None
    devices = {}
    plane = None
    graphs = None
    i = 1
    while i < len(args):
        o, v = args[i], args[i + 1]
        if o == '--workers':
            workers = int(v)
        elif o == '--frames':
            frames = int(v)
        elif o == '--backend':
            backend = v
        elif o == '--device':
            r, d = v.split('=', 1)
            devices[int(r)] = d
        elif o == '--plane':
            plane = v
        elif o == '--graphs':
            if v not in ('on', 'off'):
                sys.exit(f'--graphs on|off, not {v}')
            graphs = v
        else:
            fail_input(f'mesh-log: unknown option {o}')
        i += 2
    if workers is None or frames is None or backend is None:
        fail_input('mesh-log: --workers, --frames and --backend are needed')
    lines = read_log(path)
    wlog = {r: [] for r in range(1, workers + 1)}
    r0 = []
    for line in lines:
        m = WORKER.search(line)
        if m:
            wlog.setdefault(int(m.group(1)), []).append(m.group(3))
            continue
        m = RANK0.search(line)
        if m:
            r0.append(m.group(1))
    problems = []
    # On the MPI plane the chunks of a mesh on one host go on its lanes in
    # shared memory (the default), logged "(lane)", or with
    # PPDIFFUSE_LANES=0 over MPI.
    mpi_name = 'MPI' if os.environ.get('PPDIFFUSE_LANES') == '0' else 'lane'
    plane_name = {'mpi': mpi_name, 'nccl': 'NCCL',
                  'nccl-emulated': 'NCCL'}.get(plane)
    plan = [t for t in r0 if re.match(r'plan 0x[0-9a-f]+: ', t)]
    if not plan:
        problems.append('rank 0 logged no plan (GST_DEBUG=ppdiffuse:5?)')
    elif plane is not None and f'data plane {plane}:' not in plan[-1]:
        problems.append(f'rank 0\'s plan: {plan[-1][:200]} (expected data '
                        f'plane {plane})')
    r0_sent = [t for t in r0 if t.startswith('sent chunk ')]
    summary = []
    for r in range(1, workers + 1):
        w = wlog.get(r, [])
        dev = [t for t in w if t.startswith('node-local rank ')]
        m = re.match(r'node-local rank (\d+): backend (\S+) on (.*)$',
                     dev[-1]) if dev else None
        if not m:
            problems.append(f'worker rank {r} logged no "node-local rank" '
                            'line (PPDIFFUSE_DEBUG=4?)')
            continue
        local, be, where = m.group(1), m.group(2), m.group(3)
        want = devices.get(r)
        if be != backend:
            problems.append(f'worker rank {r}: backend {be}, expected '
                            f'{backend}')
        if want is not None and not (where == want
                                     or where.startswith(want + ' ')
                                     or where.startswith(want + ',')):
            problems.append(f'worker rank {r} (node-local rank {local}) ran '
                            f'on {where}, expected {want}')
        told = [t for t in r0 if t.startswith(f'worker rank {r} is pid ')]
        if not told:
            problems.append(f'rank 0 did not log worker rank {r}\'s device '
                            'and data plane')
        else:
            if f', {backend}: ' not in told[-1]:
                problems.append(f'rank 0 on worker rank {r}: {told[-1]}')
            if want is not None and f'{backend}: {want}' not in told[-1]:
                problems.append(f'rank 0 says worker rank {r} runs on: '
                                f'{told[-1]} (expected {want})')
            # "…, data plane P" then maybe more ("…, activations …").
            if plane is not None and not re.search(
                    rf', data plane {re.escape(plane)}(,|$)', told[-1]):
                problems.append(f'rank 0 says worker rank {r}: {told[-1]} '
                                f'(expected data plane {plane})')
        sent = [t for t in w if t.startswith('sent chunk ')]
        planes = sorted({re.sub(r'.*\((\w+)\)$', r'\1', t) for t in sent})
        if plane_name and planes != [plane_name]:
            problems.append(f'worker rank {r} sent its chunks over '
                            f'{", ".join(planes) or "nothing"}, expected '
                            f'{plane_name}')
        if plane_name == 'NCCL' and not any(
                t.startswith(f'rank {r}: chunk payloads over NCCL ({plane}), ')
                for t in w):
            problems.append(f'worker rank {r} did not set up its NCCL links')
        stop = [t for t in w if t.startswith('shutting down after ')]
        g = None
        warm = 0
        if not stop:
            problems.append(f'worker rank {r} logged no shutdown')
        else:
            sm = re.match(r'shutting down after (\d+) chunks and (\d+) '
                          r'warm-up passes, busy [0-9.]+ s, '
                          r'step graphs: (\d+) captured, (\d+) launched',
                          stop[-1])
            if not sm or int(sm.group(1)) != frames:
                problems.append(f'worker rank {r}: {stop[-1]} (expected '
                                f'{frames} chunks)')
            if sm:
                warm = int(sm.group(2))
                g = (int(sm.group(3)), int(sm.group(4)))
                # With graphs, the second chunk (warm-up passes included)
                # is captured and every later one launches it.
                want_g = ((1, frames + warm - 1) if graphs == 'on'
                          else (0, 0) if graphs == 'off' else None)
                if want_g is not None and g != want_g:
                    problems.append(f'worker rank {r}: step graphs {g[0]} '
                                    f'captured, {g[1]} launched; expected '
                                    f'{want_g[0]} and {want_g[1]} ({frames} '
                                    f'frames, {warm} warm-up passes)')
        if len(sent) != frames + warm + 1:
            problems.append(f'worker rank {r} sent {len(sent)} chunks, '
                            f'expected {frames}, {warm} warm-up passes and '
                            'the shutdown marker (PPDIFFUSE_DEBUG=4?)')
        # A worker's last line ("exited cleanly", after MPI_Finalize) can be
        # lost in Open MPI's output forwarding when rank 0 ends first; rank
        # 0's clean stop and its not having to kill the worker say the same.
        killed = [t for t in r0 if t.startswith(f'killing worker rank {r} ')]
        if killed or not any(t == 'exited cleanly' for t in w) and not any(
                t == 'mesh stopped cleanly' for t in r0):
            problems.append(f'worker rank {r} did not exit cleanly'
                            + (f': rank 0 was {killed[-1]}' if killed else ''))
        summary.append(f'rank {r} on {where.split(",")[0]} '
                       f'(node-local {local}), {len(sent)} sends over '
                       f'{"/".join(planes) or "-"}'
                       + (f', graphs {g[0]} captured {g[1]} launched'
                          if g else ''))
    # Rank 0's VAE work as graphs: the first frame is encoded into a new
    # sample and the second as is, the third captured; every frame is
    # decoded, the first as is (warm-up passes are not).
    image = [t for t in r0 if t.startswith('image graphs: ')]
    if graphs == 'on':
        want_i = (f'image graphs: encoding 1 captured, {frames - 2} '
                  f'launched; decoding 1 captured, {frames - 1} launched')
        if not image or image[-1] != want_i:
            got_i = image[-1] if image else 'no image graphs line'
            problems.append(f'rank 0: {got_i} (expected "{want_i}")')
    elif graphs == 'off' and image:
        problems.append(f'rank 0: {image[-1]} (expected no image graphs)')
    if plane_name:
        r0_planes = sorted({re.sub(r'.*\((\w+)\)$', r'\1', t)
                            for t in r0_sent})
        if r0_planes != [plane_name]:
            problems.append(f'rank 0 sent its chunks over '
                            f'{", ".join(r0_planes) or "nothing"} '
                            f'(expected {plane_name}; GST_DEBUG=ppdiffuse:5?)')
    if not any(t == 'mesh stopped cleanly' for t in r0):
        problems.append('rank 0 did not log "mesh stopped cleanly"')
    print(f'mesh: data plane {plan[-1].split("data plane ")[1].split(":")[0] if plan else "?"}; '
          + '; '.join(summary))
    for p in problems:
        print(f'  <-- {p}')
    return 0 if not problems else 1


TS = re.compile(r'^(\d+):(\d\d):(\d\d\.\d+)\s')
CLOCK = re.compile(r'(\d+):(\d\d):(\d\d\.\d+)')


def seconds(m):
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))


def read_gpu_samples(path, begin, end):
    """nvidia-smi's samples in CSV @path (timestamp, index, utilization.gpu,
    clocks.sm, power.draw) taken in [begin, end] (wall clock, s): for each
    GPU's index, its (utilization, SM clock, power) rows."""
    per_gpu = {}
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            rows = f.read().splitlines()
    except OSError as e:
        raise Unreadable(f'{path}: {e}')
    for row in rows:
        cols = [c.strip() for c in row.split(',')]
        if len(cols) < 5:
            continue
        try:
            t = datetime.datetime.strptime(
                cols[0], '%Y/%m/%d %H:%M:%S.%f').timestamp()
            util = float(cols[2])
        except ValueError:
            continue
        if begin <= t <= end:
            per_gpu.setdefault(cols[1], []).append((util, cols[3], cols[4]))
    return per_gpu


def gpu_samples(per_gpu):
    """The samples of read_gpu_samples as one line of figures a GPU; None
    where none fall in the window."""
    if not per_gpu:
        return None
    out = []
    for gpu in sorted(per_gpu):
        samples = per_gpu[gpu]
        utils = [u for u, _, _ in samples]
        clocks = [float(c) for _, c, _ in samples
                  if c.replace('.', '', 1).isdigit()]
        watts = [float(w) for _, _, w in samples
                 if w.replace('.', '', 1).isdigit()]
        figure = (f'GPU {gpu} busy {statistics.mean(utils):.0f} % of the '
                  f'time (mean of {len(utils)} samples, median '
                  f'{statistics.median(utils):.0f} %, lowest {min(utils):.0f}'
                  ' %)')
        if clocks:
            figure += f', SM clock {statistics.median(clocks):.0f} MHz'
        if watts:
            figure += f', {statistics.median(watts):.0f} W'
        out.append(figure)
    return '; '.join(out)


STATS_FPS = re.compile(r'ppdiffuse-stats, .*\bfps=\(double\)([-0-9.e+]+)')
STATS_CPU = re.compile(r'\bcpu-load=\(double\)([-0-9.e+]+)')
STATS_WORKER_CPU = re.compile(r'\bworker-cpu-load=\(double\)< ([^>]*) >')
# A string field as GstStructure writes it: quoted, each character but
# letters, digits and _-+/:. after a backslash.
STATS_DEVICE = re.compile(r'\bdevice=\(string\)"((?:\\.|[^"\\])*)"')


def rank0_device(lines):
    """Rank 0's compute device, as the last ppdiffuse-stats message that
    names one says (its backend's description); None where none does."""
    device = None
    for line in lines:
        m = STATS_DEVICE.search(line)
        if m and m.group(1):
            device = re.sub(r'\\(.)', r'\1', m.group(1))
    return device


def cpu_loads(lines, skip=2):
    """The CPU loads of the ppdiffuse-stats messages gst-launch -m wrote:
    rank 0's process and each worker's, in cores, the medians over the
    intervals that saw frames out, the first @skip of them left out (the
    warm-up); a worker's of those where it is known (0 until its second
    heartbeat: None where it never is); None where fewer than 3 intervals
    are left."""
    rank0, workers = [], []
    for line in lines:
        m = STATS_FPS.search(line)
        c = STATS_CPU.search(line)
        w = STATS_WORKER_CPU.search(line)
        if not m or not c or not w or float(m.group(1)) <= 0:
            continue
        rank0.append(float(c.group(1)))
        workers.append([float(x) for x in w.group(1).split(',')])
    rank0, workers = rank0[skip:], workers[skip:]
    if len(rank0) < 3:
        return None
    n = min(len(w) for w in workers)
    known = [[w[i] for w in workers if w[i] > 0] for i in range(n)]
    return (statistics.median(rank0),
            [statistics.median(k) if k else None for k in known],
            len(rank0))


def cmd_startup(args):
    path = args[0]
    skip = 5
    frames = None
    max_ready = None
    samples = None
    t0 = None
    rows = row = None
    i = 1
    while i < len(args):
        if args[i] == '--skip':
            skip = int(args[i + 1])
        elif args[i] == '--max-ready':
            max_ready = float(args[i + 1])
        elif args[i] == '--frames':
            frames = int(args[i + 1])
        elif args[i] == '--gpu-samples':
            samples = args[i + 1]
        elif args[i] == '--t0':
            t0 = float(args[i + 1])
        elif args[i] == '--rows':
            rows = args[i + 1]
        elif args[i] == '--row':
            row = args[i + 1]
        else:
            fail_input(f'startup: unknown option {args[i]}')
        i += 2
    t_start = t_spawn = t_ready = None
    submitted = {}
    back = {}
    pushed = {}
    warm = {}
    lines = read_log(path)
    for line in lines:
        m = TS.match(line)
        if not m:
            continue
        t = seconds(m)
        if 'progress 0%: starting the ppdiffuse worker mesh' in line:
            t_start = t
        elif re.search(r'progress 20%: starting \d+ workers', line):
            t_spawn = t
        elif 'progress 100%: the ppdiffuse worker mesh is up' in line:
            t_ready = t
        elif (s := re.search(r'submitting frame \S+ as chunk (\d+)', line)):
            submitted.setdefault(int(s.group(1)), t)
        elif (s := re.search(r'chunk (\d+) back after (\S+)', line)):
            c = CLOCK.match(s.group(2))
            if c:
                back[int(s.group(1))] = seconds(c)
        elif (s := re.search(r'pushing chunk (\d+) pts', line)):
            pushed.setdefault(int(s.group(1)), t)
        elif (s := re.search(r'warm-up pass \(chunk (\d+)\) took ([0-9.]+) '
                             r'ms', line)):
            warm[int(s.group(1))] = float(s.group(2))
    # The frames' chunks follow the warm-up passes'.
    first = len(warm)
    if sorted(warm) != list(range(first)):
        fail_input(f'startup: warm-up passes of chunks {sorted(warm)}, '
                   f'expected 0 .. {first - 1}')
    pushed = {c - first: t for c, t in pushed.items()}
    back = {c - first: t for c, t in back.items()}
    problems = []
    if t_spawn is None or t_ready is None:
        problems.append('no "starting N workers" / "mesh is up" progress in '
                        'the log (GST_DEBUG=ppdiffuse:5?): the mesh did not '
                        'start')
    if 0 not in pushed or 0 not in back:
        problems.append('no frame came back')
    elif frames is not None and sorted(pushed) != list(range(frames)):
        problems.append(f'{len(pushed)} frames pushed, expected {frames}')
    figures = []
    if t_spawn is not None and t_ready is not None:
        figures.append(f'spawn -> ready {t_ready - t_spawn:.2f} s'
                       + (f' (bound {max_ready:g} s)' if max_ready else ''))
        if max_ready is not None and t_ready - t_spawn > max_ready:
            problems.append(f'spawn -> ready took {t_ready - t_spawn:.2f} s, '
                            f'more than {max_ready:g} s')
        if t_start is not None:
            figures.append(f'start -> ready {t_ready - t_start:.2f} s')
    if warm:
        figures.append(f'{len(warm)} warm-up passes ('
                       + ', '.join(f'{warm[c]:.0f}' for c in sorted(warm))
                       + ' ms)')
    if 0 in back:
        figures.append(f'first frame round trip {back[0] * 1e3:.0f} ms')
    if 0 in pushed and t_ready is not None:
        figures.append(f'ready -> first frame pushed '
                       f'{(pushed[0] - t_ready) * 1e3:.0f} ms')
    ids = sorted(c for c in pushed if c >= skip and c - 1 in pushed)
    cells = {'fps': '-', 'p50': '-', 'p95': '-', 'busy': '-', 'cpu': '-'}

    if len(ids) >= 3:
        periods = [pushed[c] - pushed[c - 1] for c in ids]
        p50 = statistics.median(periods)
        figures.append(f'steady frame period {p50 * 1e3:.1f} ms (median of '
                       f'{len(periods)}, {1 / p50 if p50 > 0 else 0:.1f} fps)')
        # Frames that leave a pass together (frame-batch) come in bursts:
        # the median period is then a burst's, the mean the rate.
        span = pushed[ids[-1]] - pushed[ids[0] - 1]
        rate = len(ids) / span if span > 0 else 0
        cells['fps'] = f'{rate:.1f}'
        figures.append(f'steady rate {rate:.1f}'
                       f' fps (frames {ids[0] - 1}..{ids[-1]})')
        if samples is not None and t0 is not None:
            per_gpu = read_gpu_samples(samples, t0 + pushed[ids[0] - 1],
                                       t0 + pushed[ids[-1]])
            busy = gpu_samples(per_gpu)
            figures.append(busy if busy is not None else
                           'no GPU samples over the steady frames')
            if per_gpu:
                cells['busy'] = '/'.join(
                    f'{statistics.mean(u for u, _, _ in per_gpu[g]):.0f}'
                    for g in sorted(per_gpu))
    lat = sorted(back[c] for c in back if c >= skip)
    if len(lat) >= 3:
        # The 95th percentile by rank (the latency target is a p95).
        p95 = lat[max(0, math.ceil(0.95 * len(lat)) - 1)]
        cells['p50'] = f'{statistics.median(lat) * 1e3:.1f}'
        cells['p95'] = f'{p95 * 1e3:.1f}'
        figures.append(f'steady round trip {statistics.median(lat) * 1e3:.1f}'
                       f' ms (median), p95 {p95 * 1e3:.1f} ms, max '
                       f'{lat[-1] * 1e3:.1f} ms')
    elif not problems:
        problems.append(f'fewer than 3 frames after the first {skip}: no '
                        'steady figures')
    cpu = cpu_loads(lines)
    if cpu is not None:
        # What the processes cost the host's CPU, a core a unit: the
        # threads that feed the GPU and those that wait for it.
        figures.append(f'CPU rank 0 {cpu[0]:.2f} cores, '
                       + ', '.join(f'worker {i + 1} '
                                   + (f'{c:.2f}' if c is not None
                                      else 'not yet known')
                                   for i, c in enumerate(cpu[1]))
                       + f' (medians of {cpu[2]} stats intervals)')
        cells['cpu'] = '/'.join(f'{c:.2f}' if c is not None else '-'
                                for c in [cpu[0]] + cpu[1])
    device = rank0_device(lines)
    if device is not None:
        # Where rank 0 computed: a GPU, or the CPU that auto fell back to.
        figures.append(f'rank 0 on {device}')
    print('start-up: ' + ', '.join(figures) if figures
          else 'start-up: no figures')
    if rows is not None:
        try:
            with open(rows, 'a', encoding='utf-8') as f:
                f.write(f"{cells['fps']:>8} {cells['p50']:>9} "
                        f"{cells['p95']:>8} {cells['busy']:>7} "
                        f"{cells['cpu']:>10}  {row or path}\n")
        except OSError as e:
            raise Unreadable(f'{rows}: {e}')
    for p in problems:
        print(f'  <-- {p}')
    return 0 if not problems else 1


def cmd_fault(args):
    path, elapsed, bound, rank, kind = args[0], float(args[1]), \
        float(args[2]), args[3], args[4]
    lines = read_log(path)
    t_ready = None
    for line in lines:
        m = TS.match(line)
        if m and 'progress 100%: the ppdiffuse worker mesh is up' in line:
            t_ready = seconds(m)
    problems = []
    if not any(f'injecting fault {kind} at chunk' in line for line in lines):
        problems.append(f'no "injecting fault {kind}" in the log: the fault '
                        'was not injected (a build without fault-injection?)')
    errors = [line for line in lines if line.startswith('ERROR: from element')
              and 'GstPpDiffuse' in line]
    if not errors:
        problems.append('no error from the ppdiffuse element')
    elif not any(f'rank {rank}' in line for line in errors):
        problems.append(f'the error does not name rank {rank}: {errors[0]}')
    figure = 'the mesh never came up'
    if t_ready is None:
        problems.append('the mesh never came up (GST_DEBUG=ppdiffuse:5?)')
    else:
        after = elapsed - t_ready
        figure = f'ended {after:.1f} s after the mesh was up (bound {bound:g} s)'
        if after > bound:
            problems.append(f'{after:.1f} s from the mesh being up to the '
                            f'end, bound {bound:g} s')
    print(f'fault {kind} on rank {rank}: {figure}; '
          + (errors[0][:300] if errors else 'no error'))
    for p in problems:
        print(f'  <-- {p}')
    return 0 if not problems else 1


COMMANDS = {
    'npy': cmd_npy, 'frames': cmd_frames, 'tame': cmd_tame,
    'pattern': cmd_pattern, 'mesh-log': cmd_mesh_log, 'startup': cmd_startup,
    'fault': cmd_fault,
}


def main(argv):
    if len(argv) < 3 or argv[1] not in COMMANDS:
        sys.stderr.write(__doc__)
        return 2
    try:
        return COMMANDS[argv[1]](argv[2:])
    except Unreadable as e:
        print(f'gpucheck {argv[1]}: {e}')
        return 2
    except (IndexError, ValueError) as e:
        print(f'gpucheck {argv[1]}: bad arguments ({e})')
        return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
