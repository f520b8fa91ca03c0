#!/usr/bin/python3
"""metrics.jsonl after test_async's case `metrics` (tests/mpi/test_async.c runs this on rank 0):

    /usr/bin/python3 -B check_metrics_jsonl.py METRICS.jsonl N RANKS BYTES,... PREFIX,... PHASES

N lines, one per committed save, each valid JSON with every field; line i has prefix PREFIX[i],
mode async, RANKS ranks and BYTES[i] bytes; the phases (blocking_s, write_s, agree_s, merge_s,
commit_s) and the derived numbers are finite and >= 0, training_time_saved_s is the background time
beyond blocking_s, and the last line's phases are PHASES (what ckpt_saver_metrics_get gave).
"""
import json, math, sys
path, n, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nbytes = [int(x) for x in sys.argv[4].split(',')]
prefixes = sys.argv[5].split(',')
last = [float(x) for x in sys.argv[6].split(',')]
bad = 0
def fail(m):
    global bad
    bad += 1
    print('metrics.jsonl: ' + m)
lines = open(path).read().splitlines()
if len(lines) != n:
    fail('%d lines, want %d (one per committed save)' % (len(lines), n))
recs = []
for i, l in enumerate(lines):
    try:
        recs.append(json.loads(l))
    except Exception as e:
        fail('line %d is not JSON (%s): %r' % (i + 1, e, l))
phases = ('blocking_s', 'write_s', 'agree_s', 'merge_s', 'commit_s')
for i, r in enumerate(recs):
    for k in ('prefix', 'mode', 'bytes', 'ranks', 'timestamp') + phases:
        if k not in r:
            fail('line %d lacks %s' % (i + 1, k))
    if i < len(prefixes) and r.get('prefix') != prefixes[i]:
        fail('line %d: prefix %r, want %r' % (i + 1, r.get('prefix'), prefixes[i]))
    if r.get('mode') != 'async':
        fail('line %d: mode %r' % (i + 1, r.get('mode')))
    if r.get('ranks') != ranks:
        fail('line %d: ranks %r, want %d' % (i + 1, r.get('ranks'), ranks))
    if i < len(nbytes) and r.get('bytes') != nbytes[i]:
        fail('line %d: bytes %r, want %d' % (i + 1, r.get('bytes'), nbytes[i]))
    for k in phases + ('gbps', 'since_prev_s', 'training_time_saved_s'):
        v = r.get(k)
        if (not isinstance(v, (int, float)) or isinstance(v, bool) or
                not math.isfinite(v) or v < 0):
            fail('line %d: %s = %r, want a finite number >= 0' % (i + 1, k, v))
    if i == 0 and r.get('since_prev_s') != 0:
        fail('line 1: since_prev_s = %r, want 0 (the first save of the saver)' %
             r.get('since_prev_s'))
    try:
        bg = r['write_s'] + r['agree_s'] + r['merge_s'] + r['commit_s']
        # async: what the training did not wait for; each field is rounded to 1e-6
        if abs(r['training_time_saved_s'] - max(0.0, bg - r['blocking_s'])) > 1e-5:
            fail('line %d: training_time_saved_s %r is not the background time beyond'
                 ' blocking_s (%r)' % (i + 1, r['training_time_saved_s'],
                                       bg - r['blocking_s']))
    except (KeyError, TypeError):
        pass
if recs and [recs[-1].get(k) for k in phases] != last:
    fail('last line: phases %r, want those of ckpt_saver_metrics_get %r' %
         ([recs[-1].get(k) for k in phases], last))
print('metrics.jsonl: %d lines checked, %d problem(s)' % (len(recs), bad))
sys.exit(1 if bad else 0)
