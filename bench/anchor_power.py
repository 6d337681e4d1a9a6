"""SM clock, power-cap share and board power of the FlexGEMM anchor's timed repeats.

Usage (H200 machine, from the checkout's root, the anchor copied to .anchor/):

    CFGS='256,256,2;1024,64,2' python3 bench/anchor_power.py .anchor OUT.jsonl fp16

Runs the anchor's flexgemm_bench.py unchanged, in this process, while nvidia-smi samples
the board power, the SM clock and the software power-cap flag every 10 ms. The anchor
resets the peak-memory counter right before each mode's timed repeats and prints the
mode's record right after them; those two calls mark each window, and the record is
written again with a "power" object over the samples inside its window: power_w_mean,
energy_j_per_step (mean power x ms per step), sm_mhz_mean, sm_mhz_min,
power_capped_fraction, samples, interval_ms (the fields of our bench's -power, except
that our energy comes from NVML's energy counter). Timing is the anchor's own: this
script only watches it.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

INTERVAL_MS = 10


def query_fields():
    """The first field list this nvidia-smi accepts (newer drivers know the
    instant power reading and the clocks_event_reasons names)."""
    for power in ('power.draw.instant', 'power.draw'):
        for cap in ('clocks_event_reasons.sw_power_cap', 'clocks_throttle_reasons.sw_power_cap'):
            fields = 'timestamp,%s,clocks.sm,%s' % (power, cap)
            r = subprocess.run(['nvidia-smi', '--query-gpu=' + fields, '--format=csv,noheader,nounits'],
                               capture_output=True, text=True)
            if r.returncode == 0 and len(r.stdout.split(',')) == 4:
                return fields
    sys.exit('anchor_power.py: nvidia-smi accepts none of the power / clock field lists')


def start_sampler(path):
    """Starts nvidia-smi writing one CSV line per sample to path."""
    f = open(path, 'w')
    p = subprocess.Popen(['nvidia-smi', '--query-gpu=' + query_fields(), '--format=csv,noheader,nounits',
                          '-lms', str(INTERVAL_MS)], stdout=f, stderr=subprocess.DEVNULL)
    return p, f


def read_samples(path):
    """Returns (unix time, watts, MHz, capped) tuples from the sampler's file."""
    out = []
    for line in open(path):
        parts = [x.strip() for x in line.split(',')]
        if len(parts) != 4:
            continue
        try:
            t = datetime.datetime.strptime(parts[0], '%Y/%m/%d %H:%M:%S.%f').timestamp()
            out.append((t, float(parts[1]), float(parts[2]), parts[3].lower() == 'active'))
        except ValueError:
            continue
    return out


def summarise(samples, t0, t1, ms):
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return {'samples': 0, 'interval_ms': INTERVAL_MS}
    w = sum(s[1] for s in inside) / len(inside)
    return {'power_w_mean': round(w, 1), 'energy_j_per_step': round(w * ms / 1000, 4),
            'sm_mhz_mean': round(sum(s[2] for s in inside) / len(inside), 1),
            'sm_mhz_min': min(s[2] for s in inside),
            'power_capped_fraction': round(sum(s[3] for s in inside) / len(inside), 3),
            'samples': len(inside), 'interval_ms': INTERVAL_MS}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    anchor, out_path, dtypes = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.path.insert(0, os.path.abspath(anchor))
    import flexgemm_bench as fb  # the anchor's script, unchanged
    import torch

    windows = []  # [t_start, t_end, record]
    reset = torch.cuda.reset_peak_memory_stats

    def mark_start(*a, **k):
        windows.append([time.time(), None, None])
        return reset(*a, **k)

    def mark_end(*a, **k):
        if windows and windows[-1][1] is None and a:
            try:
                windows[-1][1], windows[-1][2] = time.time(), json.loads(a[0])
            except (TypeError, ValueError):
                pass
        print(*a, **k)

    torch.cuda.reset_peak_memory_stats = mark_start
    fb.print = mark_end  # the module's prints resolve to this first
    fb.flex_gemm.ops.spconv.set_algorithm(fb.flex_gemm.ops.spconv.Algorithm.MASKED_IMPLICIT_GEMM_SPLITK)
    cfgs = [tuple(int(x) for x in c.split(',')) for c in os.environ['CFGS'].split(';')]
    tmp = tempfile.NamedTemporaryFile(suffix='.csv', delete=False).name
    proc, f = start_sampler(tmp)
    try:
        time.sleep(0.2)
        with open(os.devnull, 'w') as sink:
            for dt in dtypes:
                for cfg in cfgs:
                    fb.run(cfg, dt, sink)
        time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait()
        f.close()
    samples = read_samples(tmp)
    os.remove(tmp)
    with open(out_path, 'a') as out:
        for t0, t1, rec in windows:
            if rec is None:
                continue
            rec['power'] = summarise(samples, t0, t1, rec['ms'])
            out.write(json.dumps(rec) + '\n')
            print(rec['RES'], rec['mode'], rec['ms'], rec['power'], flush=True)


if __name__ == '__main__':
    main()
